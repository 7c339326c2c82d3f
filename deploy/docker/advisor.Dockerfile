# gpuq-advisor, built by deploy/build-images.sh (CGO_ENABLED=0, static).
# Build context: a directory holding gpuq-advisor.
FROM scratch
COPY gpuq-advisor /gpuq-advisor
USER 65532:65532
ENTRYPOINT ["/gpuq-advisor"]
