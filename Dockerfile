# mail-worker: build with cargo, run on Debian slim as a non-root user.
# Migrations, Lua scripts and the admin UI's templates are compiled into the binaries; the image needs no source tree
# (.dockerignore keeps target/ and the rest out of the build context).
#
# Two targets (docs/decisions/0043-release-image-and-upgrades.md):
#   docker build -t mail-worker:0.2.0-dev .                       # `release` (the last stage, the default): mail-worker only
#   docker build --target dev -t mail-worker-dev:0.2.0-dev .      # `dev`: + graph-sim and the demo (compose, by hand)
# Base images are pinned by digest (the tag says what it is, the digest what is pulled); Renovate
# or Dependabot's docker ecosystem moves both. `scripts/image-root.sh` (run by .ci/run) runs the
# release binary in a root made of the runtime stage's parts, as user 10001, read-only.
FROM rust:1.95-slim-bookworm@sha256:d7482085ff5b415f84dba5647ae71606650bdef00db7aeb69f4b3d170c3e4082 AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p mail-worker --bin mail-worker

# The stand-in and the demo, built apart so that the release build never compiles them.
FROM build AS build-dev
RUN cargo build --release --locked -p graph-sim -p mail-worker-demo --bins

FROM debian:bookworm-slim@sha256:88200866dfff7ea7f5cbcb6ec7c8a701889efe6fe859fe64d6990e4b07ea4171 AS runtime
# ca-certificates: the CA bundle (/etc/ssl/certs/ca-certificates.crt) rediss:// and the providers' TLS trust.
# The user has no home and no shell; nothing is written to the root filesystem (readOnlyRootFilesystem).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 mailworker \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin mailworker
USER 10001:10001
# METRICS_LISTEN's default port: /metrics (Prometheus), /healthz (liveness), /readyz (readiness).
ENV METRICS_LISTEN=0.0.0.0:9184
EXPOSE 9184
# `mail-worker admin` (the admin UI) listens on ADMIN_LISTEN, default 127.0.0.1:9185: in a
# container set ADMIN_LISTEN=0.0.0.0:9185 and ADMIN_TOKEN (docs/operations.md "Admin UI").
ENTRYPOINT ["mail-worker"]
CMD ["run"]

FROM runtime AS dev
COPY --from=build-dev /src/target/release/mail-worker /src/target/release/graph-sim /src/target/release/mail-worker-demo /usr/local/bin/
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["mail-worker", "probe", "--path", "/healthz"]

FROM runtime AS release
COPY --from=build /src/target/release/mail-worker /usr/local/bin/
# Liveness through the binary itself (the image has no curl); a one-shot command such as
# `migrate` has no listener and is not health-checked by orchestrators that run it as a job.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["mail-worker", "probe", "--path", "/healthz"]
