package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/amemory/memory-operator/internal/testutil"
)

// The control plane (etcd and kube-apiserver, as the demo's hack/localcluster runs
// them) is started by the first test that needs it and stopped after the last.
var plane struct {
	once       sync.Once
	env        *envtest.Environment
	kubeconfig string
	client     client.Client
	err        error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if plane.env != nil {
		if err := plane.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		}
		_ = os.Remove(plane.kubeconfig)
	}
	if operator.dir != "" {
		_ = os.RemoveAll(operator.dir)
	}
	os.Exit(code)
}

// controlPlane returns an admin kubeconfig file and client for the shared control plane.
func controlPlane(t *testing.T) (string, client.Client) {
	t.Helper()
	testutil.ControlPlaneAssets(t)
	plane.once.Do(func() {
		env := &envtest.Environment{}
		if _, err := env.Start(); err != nil {
			plane.err = err
			return
		}
		plane.env = env
		user, err := env.AddUser(envtest.User{Name: "scripts-admin", Groups: []string{"system:masters"}}, nil)
		if err != nil {
			plane.err = err
			return
		}
		raw, err := user.KubeConfig()
		if err != nil {
			plane.err = err
			return
		}
		f, err := os.CreateTemp("", "scripts-kubeconfig-*")
		if err == nil {
			plane.kubeconfig = f.Name()
			_, err = f.Write(raw)
			_ = f.Close()
		}
		if err != nil {
			plane.err = err
			return
		}
		plane.client, plane.err = client.New(user.Config(), client.Options{})
	})
	if plane.err != nil {
		t.Fatalf("control plane: %v", plane.err)
	}
	return plane.kubeconfig, plane.client
}

// operatorBinary builds memory-operator once for the package's tests.
var operator struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func operatorBinary(t *testing.T) string {
	t.Helper()
	operator.once.Do(func() {
		operator.dir, operator.err = os.MkdirTemp("", "scripts-bin-*")
		if operator.err != nil {
			return
		}
		operator.path = filepath.Join(operator.dir, "memory-operator")
		out, err := exec.Command("go", "build", "-o", operator.path, "github.com/amemory/memory-operator").CombinedOutput()
		if err != nil {
			operator.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if operator.err != nil {
		t.Fatal(operator.err)
	}
	return operator.path
}
