# The taloscluster agent's image: `make image` builds it (docker build).
# The binary is static (no cgo) and runs as the distroless nonroot user,
# 65532, which deploy/base/deployment.yaml also sets.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a change of the code alone reuses the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
	-o /out/taloscluster ./cmd/taloscluster

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/taloscluster /taloscluster
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/taloscluster", "agent"]
