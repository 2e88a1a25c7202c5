# Build a static presenced binary and run it on a minimal base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/presenced ./cmd/presenced

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/presenced /presenced
WORKDIR /data
ENV PRESENCE_DATA=/data/presenced.db
EXPOSE 3000
ENTRYPOINT ["/presenced"]
CMD ["serve"]
