package helm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of one rendering, decoded into their API types.
type manifests struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	secrets         []corev1.Secret
	pdbs            []policyv1.PodDisruptionBudget
	serviceMonitors []serviceMonitor
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor the chart uses.
// Decoded strictly like the rest, so a field the chart adds must be added here, after a
// look at the CRD.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// helmTemplate renders the chart with the helm pinned as a tool in this module's go.mod.
func helmTemplate(args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"tool", "helm", "template", "backfill", "./backfill", "--namespace", "jobs"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm template %v: %w: %s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

// render renders the chart and decodes every object strictly: a field that its API type
// does not have (misspelt, or put at the wrong level) fails the test.
func render(t *testing.T, args ...string) manifests {
	t.Helper()
	out, err := helmTemplate(args...)
	require.NoError(t, err)
	m, err := decodeAll(out)
	require.NoError(t, err)
	return m
}

func decodeAll(out string) (manifests, error) {
	var m manifests
	for _, doc := range strings.Split(out, "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return m, fmt.Errorf("yaml: %w\n%s", err, doc)
		}
		var meta metav1.TypeMeta
		if err := json.Unmarshal(j, &meta); err != nil {
			return m, err
		}
		var target any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			m.deployments = append(m.deployments, appsv1.Deployment{})
			target = &m.deployments[len(m.deployments)-1]
		case "v1 Service":
			m.services = append(m.services, corev1.Service{})
			target = &m.services[len(m.services)-1]
		case "v1 Secret":
			m.secrets = append(m.secrets, corev1.Secret{})
			target = &m.secrets[len(m.secrets)-1]
		case "policy/v1 PodDisruptionBudget":
			m.pdbs = append(m.pdbs, policyv1.PodDisruptionBudget{})
			target = &m.pdbs[len(m.pdbs)-1]
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m.serviceMonitors = append(m.serviceMonitors, serviceMonitor{})
			target = &m.serviceMonitors[len(m.serviceMonitors)-1]
		default:
			return m, fmt.Errorf("unexpected object %s %s: decode it in this test", meta.APIVersion, meta.Kind)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(target); err != nil {
			return m, fmt.Errorf("%s: %w\n%s", meta.Kind, err, doc)
		}
	}
	return m, nil
}

// stripComments drops helm's "# Source:" lines, so that a template that renders nothing
// is not taken for an object.
func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}
