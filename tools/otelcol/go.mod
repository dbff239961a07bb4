module sandbox-edge/tools/otelcol

go 1.26

require (
	github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v0.165.1
	go.opentelemetry.io/collector/receiver/otlpreceiver v0.165.0
)
