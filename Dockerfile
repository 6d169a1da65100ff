# syntax=docker/dockerfile:1

# Build static binaries: CGO off so that they run on distroless/static, which has no libc.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, in their own layer, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/api ./cmd/api && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/backfillctl ./cmd/backfillctl

# distroless/static: CA certificates and tzdata, no shell, runs as uid 65532 (nonroot).
# The image carries the CLI too, so that `docker compose exec api /backfillctl ...` and the
# demo executor need nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /api
COPY --from=build /out/backfillctl /backfillctl
ENV HTTP_ADDR=:8080
EXPOSE 8080
USER nonroot:nonroot
# No shell or curl here: the binary probes its own /readyz.
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=3 CMD ["/api", "healthcheck"]
ENTRYPOINT ["/api"]
