# A static gateway binary on a minimal image, run as a non-root user.
# The image holds no PostgreSQL: set DATABASE_URL.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The context holds no .git (.dockerignore), so the build cannot read the
# commit that `gateway version` and hookgate_build_info name; pass it:
#   docker build --build-arg COMMIT=$(git rev-parse HEAD) .
# Without it they say "unknown".
ARG COMMIT
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/hookgate/hookgate/internal/version.commit=${COMMIT}" -o /out/gateway ./cmd/gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /gateway
USER nonroot:nonroot
EXPOSE 8080
# The image has no curl: the binary asks its own /readyz (GATEWAY_ADDR's port,
# from the container's environment). The start period covers migrations at start.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 CMD ["/gateway", "healthcheck"]
ENTRYPOINT ["/gateway"]
CMD ["serve"]
