package kube_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/taloscluster/taloscluster/lab/kube"
)

// connectionLost reports whether err is a transport failure, as client-go
// classifies it, and not an answer from the server.
func connectionLost(err error) bool {
	var st apierrors.APIStatus
	if err == nil || errors.As(err, &st) {
		return false
	}
	return utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)
}

func unschedulable(t *testing.T, s *kube.Server, name string) bool {
	t.Helper()
	for _, n := range s.Nodes() {
		if n.Name == name {
			return n.Spec.Unschedulable
		}
	}
	t.Fatalf("no node %s", name)
	return false
}

// TestConnectionFaults checks reset, lost-reply and hang with client-go
// (over HTTP/2): a reset cordon is not applied, a cordon whose reply is
// lost is, a hung get times out, and the next request is served.
func TestConnectionFaults(t *testing.T) {
	t.Parallel()
	s, _, _ := startEmulator(t, kube.Options{})
	if err := s.AddNode(kube.Node{Name: "n1", Role: kube.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	c := adminClient(t, s)
	ctx := testContext(t)
	cordon := func(on bool) error {
		patch := `{"spec":{"unschedulable":false}}`
		if on {
			patch = `{"spec":{"unschedulable":true}}`
		}
		_, err := c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}

	s.ResetConn("patch nodes", 1)
	if err := cordon(true); !connectionLost(err) {
		t.Fatalf("reset cordon: %v, want a lost connection", err)
	}
	if unschedulable(t, s, "n1") {
		t.Error("the reset cordon was applied")
	}

	s.LoseReply("patch nodes", 1)
	if err := cordon(true); !connectionLost(err) {
		t.Fatalf("cordon with a lost reply: %v, want a lost connection", err)
	}
	if !unschedulable(t, s, "n1") {
		t.Error("the cordon whose reply was lost was not applied")
	}

	s.Hang("get nodes", 1)
	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.CoreV1().Nodes().Get(hctx, "n1", metav1.GetOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung get: %v, want the client's deadline", err)
	}

	// The faults are used up; the client reconnects.
	if err := cordon(false); err != nil {
		t.Fatalf("uncordon after the faults: %v", err)
	}
	if n, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("get after the faults: %v", err)
	}

	var faults []string
	for _, op := range s.Log() {
		if op.Fault != "" {
			faults = append(faults, fmt.Sprintf("%s %s %d", op.Key(), op.Fault, op.Code))
		}
	}
	if want := []string{"patch nodes reset 0", "patch nodes lost-reply 200", "get nodes hang 0"}; !slices.Equal(faults, want) {
		t.Errorf("faults in the log %q, want %q", faults, want)
	}
}
