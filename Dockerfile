# Build: docker build -t kairos .    Run: docker compose up (see docker-compose.yml)

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Everything the build embeds: sqlx::migrate! reads ./migrations, the store's statements are
# read from src/store/sql, and openapi.yaml is embedded, all at compile time. Of the workspace's other member, the benchmark, cargo reads only
# the manifest here: the daemon alone is built.
COPY Cargo.toml Cargo.lock ./
COPY bench/Cargo.toml ./bench/
COPY src ./src
COPY migrations ./migrations
COPY openapi.yaml ./
COPY config ./config
RUN cargo build --release --locked -p kairos --bin kairos

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --no-create-home --shell /usr/sbin/nologin kairos
COPY --from=builder /src/target/release/kairos /usr/local/bin/kairos
COPY config/kairos.toml /etc/kairos/kairos.toml
ENV KAIROS_CONFIG=/etc/kairos/kairos.toml \
    KAIROS_LISTEN=0.0.0.0:8080
USER kairos
EXPOSE 8080
ENTRYPOINT ["kairos"]
CMD ["serve"]
