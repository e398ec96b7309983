# turnpike's container image: a static binary on an empty base, run as a
# non-root user. Build it from the repository root:
#
#   docker build -t turnpike:dev .
#
# and run it with a config file mounted at /etc/turnpike/config.yaml:
#
#   docker run -p 8080:8080 -v $PWD/turnpike.yaml:/etc/turnpike/config.yaml:ro turnpike:dev
#
# The config's addr must listen beyond loopback (addr: ":8080"), and its
# dataDir should be /var/lib/turnpike (a volume) when the state is Pebble.
# The Helm chart under deploy/helm/turnpike sets both.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a change of code reuses the downloaded modules.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: a static binary that needs no libc. timetzdata embeds the
# time zone database, which lending schedules (lendSchedule.timezone) read
# and the empty base image lacks.
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata -ldflags "-s -w" -o /out/turnpike ./cmd/turnpike
# What the empty base lacks: CA certificates for https engines, rediss://
# and OTLP over TLS; a writable /tmp and a state directory owned by the
# user the gateway runs as.
RUN mkdir -p /out/dirs/tmp /out/dirs/var/lib/turnpike /out/dirs/etc/turnpike

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build --chown=65532:65532 /out/dirs/ /
COPY --from=build /out/turnpike /turnpike
# 65532: the conventional non-root user of static images; no passwd entry
# is needed, and Kubernetes' runAsNonRoot accepts a numeric USER.
USER 65532:65532
EXPOSE 8080
VOLUME ["/var/lib/turnpike"]
ENTRYPOINT ["/turnpike"]
CMD ["serve", "--config", "/etc/turnpike/config.yaml"]
