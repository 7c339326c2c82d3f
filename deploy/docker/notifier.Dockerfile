# gpuq-notifier, built by deploy/build-images.sh (CGO_ENABLED=0, static).
# Build context: a directory holding gpuq-notifier.
FROM scratch
COPY gpuq-notifier /gpuq-notifier
# /gpuq: `gpuq health URL`, the health check (no shell here).
COPY gpuq /gpuq
USER 65532:65532
ENTRYPOINT ["/gpuq-notifier"]
