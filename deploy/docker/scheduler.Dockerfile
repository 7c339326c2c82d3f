# gpuq-scheduler, built by deploy/build-images.sh (CGO_ENABLED=0, static).
# Build context: a directory holding gpuq-scheduler.
FROM scratch
COPY gpuq-scheduler /gpuq-scheduler
USER 65532:65532
ENTRYPOINT ["/gpuq-scheduler"]
