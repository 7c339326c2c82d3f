# gpuq-advisor, built by deploy/build-images.sh (CGO_ENABLED=0, static).
# Build context: a directory holding gpuq-advisor.
FROM scratch
COPY gpuq-advisor /gpuq-advisor
# /gpuq: `gpuq health URL`, the health check (no shell here).
COPY gpuq /gpuq
USER 65532:65532
ENTRYPOINT ["/gpuq-advisor"]
