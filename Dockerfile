# context-relay-gateway in a container.
#
#   docker build -t context-relay-gateway .                    # or --build-arg PGO=1
#   docker run -d -p 4000:4000 \
#     -v "$PWD/gateway.toml:/etc/context-relay/gateway.toml:ro" \
#     -v context-relay-data:/var/lib/context-relay \
#     -e OPENAI_API_KEY -e OPENAI_API_KEY_2 -e ANTHROPIC_API_KEY -e GEMINI_API_KEY \
#     -e GATEWAY_CLIENT_KEY -e GATEWAY_ADMIN_TOKEN \
#     context-relay-gateway
#
# (the variables gateway.example.toml names; pass the `*_env` variables your file names).
# The configuration's [store] path must be under /var/lib/context-relay (the volume), as in
# gateway.example.toml; the gateway listens on 0.0.0.0:4000, so the file needs [[clients]].
# SIGHUP (docker kill -s HUP) reloads the file; SIGTERM (docker stop) drains and exits.

# Build: the same command the README's install section gives, or with `--build-arg PGO=1` the
# profile-guided build of scripts/pgo.sh (two to three times the time; fewer instructions and
# instruction-cache misses per request, docs/performance.md "A profile-guided build"). Its
# training run stops the instrumented gateway with kill(1), from procps.
FROM rust:1.90-slim-bookworm AS build
ARG PGO=0
WORKDIR /src
COPY . .
# hadolint ignore=DL3008
RUN if [ "$PGO" = 1 ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends procps \
        && rm -rf /var/lib/apt/lists/* \
        && rustup component add llvm-tools \
        && PGO_OUT=/out/bin scripts/pgo.sh; \
    else \
        cargo install --locked --path crates/gateway --root /out; \
    fi \
    && mkdir -p /out/data

# Run: glibc and nothing else (no shell, no package manager), as an unprivileged user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/bin/context-relay-gateway /usr/local/bin/context-relay-gateway
COPY --from=build --chown=65532:65532 /out/data /var/lib/context-relay
COPY gateway.example.toml /etc/context-relay/gateway.toml
USER 65532:65532
VOLUME ["/var/lib/context-relay"]
EXPOSE 4000
HEALTHCHECK --interval=10s --timeout=6s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/context-relay-gateway", "--probe", "http://127.0.0.1:4000/readyz"]
ENTRYPOINT ["/usr/local/bin/context-relay-gateway"]
CMD ["--config", "/etc/context-relay/gateway.toml", "--listen", "0.0.0.0:4000"]
