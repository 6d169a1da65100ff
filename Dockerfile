# syntax=docker/dockerfile:1

# Build a static binary: CGO off so that it runs on distroless/static, which has no libc.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, in their own layer, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/api ./cmd/api

# distroless/static: CA certificates and tzdata, no shell, runs as uid 65532 (nonroot).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /api
ENV HTTP_ADDR=:8080
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/api"]
