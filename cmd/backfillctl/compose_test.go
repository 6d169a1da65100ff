package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// composeFile is the part of docker-compose.yml a Docker-only user depends on.
type composeFile struct {
	Services map[string]struct {
		Profiles    []string          `yaml:"profiles"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
}

// The compose walk-through cannot run here (no Docker engine), so its promises are checked
// where they can be: the API service has a health check that the image can run, the demo
// executor sits behind a profile and waits for a healthy API, and its command line is one
// this CLI accepts, from a binary the image carries.
func TestComposeFileOffersAHealthyAPIAndADemoExecutor(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var compose composeFile
	require.NoError(t, yaml.Unmarshal(raw, &compose))
	dockerfile, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)

	api, ok := compose.Services["api"]
	require.True(t, ok, "docker-compose.yml has an api service")
	require.NotNil(t, api.Healthcheck, "the api service has a health check")
	require.Equal(t, []string{"CMD", "/api", "healthcheck"}, api.Healthcheck.Test,
		"the image has no shell or curl: the binary probes itself")
	require.Regexp(t, `(?m)^ENTRYPOINT \["/api"\]`, string(dockerfile))
	require.Regexp(t, `(?m)^HEALTHCHECK .*CMD \["/api", "healthcheck"\]`, string(dockerfile))

	executor, ok := compose.Services["executor"]
	require.True(t, ok, "docker-compose.yml has a demo executor")
	require.Equal(t, []string{"demo"}, executor.Profiles, "the executor only starts with --profile demo")
	require.Equal(t, "service_healthy", executor.DependsOn["api"].Condition)
	require.Equal(t, "http://api:8080", executor.Environment["BACKFILL_SERVER"])
	require.NotEmpty(t, executor.Entrypoint)
	require.Equal(t, "/backfillctl", executor.Entrypoint[0])
	require.Regexp(t, regexp.MustCompile(`(?m)^COPY --from=build /out/backfillctl /backfillctl$`), string(dockerfile),
		"the image carries the CLI the executor runs")

	// The executor's arguments parse: with the context already done it stops before its
	// first claim, where a flag this CLI does not know would be a usage error (exit 3).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return executor.Environment[k] }
	code := run(ctx, executor.Entrypoint[1:], getenv, &stdout, &stderr)
	require.NotContains(t, stderr.String(), "flag provided but not defined")
	require.NotEqual(t, exitError, code, "stderr: %s", stderr.String())
}
