# gpuq-submitter, built by deploy/build-images.sh (CGO_ENABLED=0, static).
# Build context: a directory holding gpuq-submitter.
FROM scratch
COPY gpuq-submitter /gpuq-submitter
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/gpuq-submitter"]
