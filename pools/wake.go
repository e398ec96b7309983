package pools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Defaults of a pool's wake hook.
const (
	DefaultWakeTimeout  = 10 * time.Second
	DefaultWakeCooldown = 30 * time.Second
)

// WakeConfig is how a pool scaled to zero is woken when a turn arrives for
// it and it has no endpoint: a webhook, or a Deployment scaled up through
// the Kubernetes API. The turn waits in flow control's queue, up to its
// band's TTL, for an endpoint to join (discovery); it is answered 503
// only when the TTL passes.
type WakeConfig struct {
	// URL is posted {"pool": …, "models": […]} (JSON); any 2xx is done.
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// Deployment is the Deployment scaled up, "namespace/name" or "name"
	// (the gateway's own namespace), through its scale subresource; the
	// gateway's service account needs get and update on that one
	// object's deployments/scale (the chart grants it).
	Deployment string `yaml:"deployment,omitempty" json:"deployment,omitempty"`
	// Replicas is what the Deployment is scaled to when it has fewer.
	// Default 1.
	Replicas int32 `yaml:"replicas,omitempty" json:"replicas,omitempty"`
	// Kubeconfig for Deployment outside a cluster; default $KUBECONFIG,
	// then the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig,omitempty" json:"kubeconfig,omitempty"`
	// Timeout bounds one call. Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Cooldown is how long after a call no other is made for the pool,
	// however many turns arrive. Default 30s.
	Cooldown time.Duration `yaml:"cooldown,omitempty" json:"cooldown,omitempty"`
}

// validate reports what is wrong with c, at field where.
func (c *WakeConfig) validate(where string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, FieldErrorf(where+"."+field, format, args...))
	}
	switch {
	case c.URL == "" && c.Deployment == "":
		bad("url", "a wake hook needs url or deployment")
	case c.URL != "" && c.Deployment != "":
		bad("deployment", "a wake hook is url or deployment, not both")
	}
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url", "%q is not an http or https URL", c.URL)
		}
	}
	if c.Deployment != "" {
		if parts := strings.Split(c.Deployment, "/"); len(parts) > 2 || parts[len(parts)-1] == "" || parts[0] == "" {
			bad("deployment", "%q is not name or namespace/name", c.Deployment)
		}
	}
	if c.Replicas < 0 {
		bad("replicas", "%d is negative", c.Replicas)
	}
	if c.Timeout < 0 {
		bad("timeout", "%v is negative", c.Timeout)
	}
	if c.Cooldown < 0 {
		bad("cooldown", "%v is negative", c.Cooldown)
	}
	return errs
}

// waker calls one pool's wake hook, at most once a cooldown.
type waker struct {
	pool   string
	models []string
	cfg    WakeConfig
	client *http.Client
	calls  *prometheus.CounterVec
	mu     struct {
		sync.Mutex
		// protects the field below
		last time.Time // of the last call begun
	}
}

func newWaker(p *PoolConfig, calls *prometheus.CounterVec) *waker {
	w := &waker{pool: p.Name, models: p.ServedModels, cfg: *p.Wake, client: &http.Client{}, calls: calls}
	if w.cfg.Replicas == 0 {
		w.cfg.Replicas = 1
	}
	if w.cfg.Timeout == 0 {
		w.cfg.Timeout = DefaultWakeTimeout
	}
	if w.cfg.Cooldown == 0 {
		w.cfg.Cooldown = DefaultWakeCooldown
	}
	return w
}

// kubeRESTConfig is the API server's config from the kubeconfig at path,
// else $KUBECONFIG, else the in-cluster config.
func kubeRESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	return rest.InClusterConfig()
}

// wake calls the hook in a goroutine of its own unless one was begun
// within the cooldown. The registry's group waits for it at Close.
func (w *waker) wake(r *Registry) {
	now := time.Now()
	w.mu.Lock()
	if !w.mu.last.IsZero() && now.Sub(w.mu.last) < w.cfg.Cooldown {
		w.mu.Unlock()
		return
	}
	w.mu.last = now
	w.mu.Unlock()
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		defer cancel()
		go func() {
			select {
			case <-r.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := w.call(ctx)
		result := "ok"
		if err != nil {
			result = "error"
			r.log.Warn("pools: waking a pool with no endpoint failed; its turns wait out their TTL unless an endpoint joins", "pool", w.pool, "err", err)
		} else {
			r.log.Info("pools: woke a pool with no endpoint", "pool", w.pool)
		}
		w.calls.WithLabelValues(w.pool, result).Inc()
	})
}

func (w *waker) call(ctx context.Context) error {
	if w.cfg.URL != "" {
		body, _ := json.Marshal(struct {
			Pool   string   `json:"pool"`
			Models []string `json:"models"`
		}{w.pool, w.models})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := w.client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("the wake hook answered %s", resp.Status)
		}
		return nil
	}
	ns, name := ownNamespace(), w.cfg.Deployment
	if i := strings.IndexByte(name, '/'); i >= 0 {
		ns, name = name[:i], name[i+1:]
	}
	rc, err := kubeRESTConfig(w.cfg.Kubeconfig)
	if err != nil {
		return err
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "turnpike"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	deployments := client.AppsV1().Deployments(ns)
	scale, err := deployments.GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("deployment %s/%s: %w", ns, name, err)
	}
	if scale.Spec.Replicas >= w.cfg.Replicas {
		return nil
	}
	_, err = deployments.UpdateScale(ctx, name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: scale.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: w.cfg.Replicas},
	}, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("scaling deployment %s/%s to %d: %w", ns, name, w.cfg.Replicas, err)
	}
	return nil
}

// Wake calls the wake hook of each pool that serves model, has one and
// has no endpoint listed, unless it was called within its cooldown, and
// reports whether any pool serving model has a hook: then a turn for
// model waits for an endpoint to join instead of failing at once.
func (r *Registry) Wake(model string) bool {
	found := false
	for _, p := range r.Pools {
		w := r.wakers[p.Config.Name]
		if w == nil || !p.Serves(model) {
			continue
		}
		found = true
		if len(*p.eps.Load()) == 0 {
			w.wake(r)
		}
	}
	return found
}
