# gpuq-submitter, built by deploy/build-images.sh (CGO_ENABLED=0, static).
# Build context: a directory holding gpuq-submitter.
FROM scratch
COPY gpuq-submitter /gpuq-submitter
# /gpuq: `gpuq health URL`, the health check (no shell here).
COPY gpuq /gpuq
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/gpuq-submitter"]
