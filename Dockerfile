# mail-worker: build with cargo, run on Debian slim as a non-root user.
# Migrations, Lua scripts and the admin UI's templates are compiled into the binaries; the image needs no source tree
# (.dockerignore keeps target/ and the rest out of the build context).
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p mail-worker -p graph-sim --bins

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home mailworker
COPY --from=build /src/target/release/mail-worker /src/target/release/graph-sim /usr/local/bin/
USER 10001
# METRICS_LISTEN's default port: /metrics (Prometheus), /healthz (liveness), /readyz (readiness).
ENV METRICS_LISTEN=0.0.0.0:9184
EXPOSE 9184
# Liveness through the binary itself (the image has no curl); a one-shot command such as
# `migrate` has no listener and is not health-checked by orchestrators that run it as a job.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["mail-worker", "probe", "--path", "/healthz"]
# `mail-worker admin` (the admin UI) listens on ADMIN_LISTEN, default 127.0.0.1:9185: in a
# container set ADMIN_LISTEN=0.0.0.0:9185 and ADMIN_TOKEN (docs/operations.md "Admin UI").
ENTRYPOINT ["mail-worker"]
CMD ["run"]
