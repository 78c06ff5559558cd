# mail-worker: build with cargo, run on Debian slim as a non-root user.
# Migrations and Lua scripts are compiled into the binaries; the image needs no source tree.
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
ENTRYPOINT ["mail-worker"]
CMD ["run"]
