package helm_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const dsn = "postgres://backfill@db:5432/backfill?sslmode=require"

func TestChartRendersAStrictlyValidDeployment(t *testing.T) {
	t.Parallel()
	m := render(t, "--set", "database.url="+dsn)
	require.Len(t, m.deployments, 1)
	require.Len(t, m.services, 1)
	require.Len(t, m.secrets, 1)
	require.Len(t, m.pdbs, 1)
	require.Empty(t, m.serviceMonitors)

	d := m.deployments[0]
	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.StartupProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, int64(10), c.Lifecycle.PreStop.Sleep.Seconds)
	// preStop sleep + SHUTDOWN_TIMEOUT + stopping the background services.
	require.Equal(t, int64(10+30+5), *pod.TerminationGracePeriodSeconds)
	require.Equal(t, "30s", envValue(t, c, "SHUTDOWN_TIMEOUT"))
	require.Equal(t, ":8080", envValue(t, c, "HTTP_ADDR"))
	require.Equal(t, int32(8080), c.Ports[0].ContainerPort)

	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	require.NotNil(t, c.Resources.Requests.Cpu())

	secret := m.secrets[0]
	require.Equal(t, dsn, secret.StringData["DATABASE_URL"])
	ref := envVar(t, c, "DATABASE_URL").ValueFrom.SecretKeyRef
	require.Equal(t, secret.Name, ref.Name)
	require.Equal(t, "DATABASE_URL", ref.Key)
	// Unset settings are left to the service's defaults.
	require.Nil(t, findEnv(c, "DIRECT_DATABASE_URL"))
	require.Nil(t, findEnv(c, "SWEEP_INTERVAL"))

	labels := d.Spec.Template.Labels
	require.Equal(t, d.Spec.Selector.MatchLabels, m.pdbs[0].Spec.Selector.MatchLabels)
	require.Subset(t, labels, m.services[0].Spec.Selector)
	require.Equal(t, "http", m.services[0].Spec.Ports[0].TargetPort.StrVal)
}

func TestChartTakesAnExistingSecretAndServiceMonitor(t *testing.T) {
	t.Parallel()
	m := render(t, "--set", "database.existingSecret=backfill-db",
		"--set", "serviceMonitor.enabled=true",
		"--set", "config.SWEEP_INTERVAL=10s", "--set", "config.DB_MAX_CONNS=30")
	require.Empty(t, m.secrets, "an existing secret is not rendered")
	c := m.deployments[0].Spec.Template.Spec.Containers[0]
	for _, name := range []string{"DATABASE_URL", "DIRECT_DATABASE_URL", "API_TOKEN"} {
		require.Equal(t, "backfill-db", envVar(t, c, name).ValueFrom.SecretKeyRef.Name, name)
	}
	require.True(t, *envVar(t, c, "DIRECT_DATABASE_URL").ValueFrom.SecretKeyRef.Optional)
	require.Equal(t, "10s", envValue(t, c, "SWEEP_INTERVAL"))
	require.Equal(t, "30", envValue(t, c, "DB_MAX_CONNS"))

	require.Len(t, m.serviceMonitors, 1)
	sm := m.serviceMonitors[0]
	require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	require.Equal(t, "http", sm.Spec.Endpoints[0].Port)
	require.Equal(t, m.services[0].Spec.Selector, sm.Spec.Selector.MatchLabels)
}

func TestChartRefusesMissingDatabaseURLAndSettingsItOwns(t *testing.T) {
	t.Parallel()
	_, err := helmTemplate()
	require.ErrorContains(t, err, "set database.url")
	_, err = helmTemplate("--set", "database.url="+dsn, "--set", "config.HTTP_ADDR=:9090")
	require.ErrorContains(t, err, "config.HTTP_ADDR is set by the chart")
}

// The probes must name routes the service serves: the spec is what the router is built from.
func TestChartProbesNameRoutesOfTheSpec(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../../api/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(spec, &doc))
	require.Contains(t, doc.Paths, "/healthz")
	require.Contains(t, doc.Paths, "/readyz")
	require.Contains(t, doc.Paths, "/metrics")
}

// Every setting cmd/api reads is either a value under config or set by the chart, so a new
// setting cannot be forgotten here.
func TestChartValuesCoverEverySetting(t *testing.T) {
	t.Parallel()
	var read []string
	for file, pattern := range map[string]string{
		"../../cmd/api/config.go":         `getenv(?:\(|, )"([A-Z_]+)"`,
		"../../cmd/api/tracing_config.go": `= "(OTEL_[A-Z_]+)"`,
	} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		n := len(read)
		for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(string(src), -1) {
			read = append(read, m[1])
		}
		require.Greater(t, len(read)-n, 5, "the pattern no longer finds %s's reads", file)
	}

	raw, err := os.ReadFile("backfill/values.yaml")
	require.NoError(t, err)
	var values struct {
		Config map[string]any `json:"config"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &values))
	setByChart := []string{"HTTP_ADDR", "SHUTDOWN_TIMEOUT", "DATABASE_URL", "DIRECT_DATABASE_URL", "API_TOKEN",
		// A secret's place is extraEnv, from a Secret (values.yaml says so).
		"OTEL_EXPORTER_OTLP_HEADERS"}
	for _, name := range read {
		if !slices.Contains(setByChart, name) {
			require.Contains(t, values.Config, name, "values.yaml config lacks a setting cmd/api reads")
		}
	}
}

func TestStrictDecodingRejectsAMisplacedField(t *testing.T) {
	t.Parallel()
	_, err := decodeAll(`apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  template:
    spec:
      securityContext:
        readOnlyRootFilesystem: true
`)
	require.ErrorContains(t, err, "unknown field")
}

func findEnv(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envVar(t *testing.T, c corev1.Container, name string) *corev1.EnvVar {
	t.Helper()
	e := findEnv(c, name)
	require.NotNil(t, e, "env %s", name)
	return e
}

func envValue(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	return envVar(t, c, name).Value
}
