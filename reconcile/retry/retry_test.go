package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

func TestIsTransient(t *testing.T) {
	t.Parallel()
	plain := errors.New("bad input")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", plain, false},
		{"marked transient", retry.Transient(plain), true},
		{"marked terminal wins over type", retry.Terminal(status.Error(codes.Unavailable, "down")), false},
		{"outer mark wins", retry.Terminal(fmt.Errorf("x: %w", retry.Transient(plain))), false},
		{"wrapped mark", fmt.Errorf("doing x: %w", retry.Transient(plain)), true},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"cancelled", context.Canceled, false},
		{"grpc unavailable", status.Error(codes.Unavailable, "down"), true},
		{"grpc permission", status.Error(codes.PermissionDenied, "no"), false},
		{"grpc already exists", status.Error(codes.AlreadyExists, "etcd data directory is not empty"), false},
		{"kube 429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"kube 404", apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "n1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := retry.IsTransient(tt.err); got != tt.want {
				t.Errorf("IsTransient(%v) = %t, want %t", tt.err, got, tt.want)
			}
		})
	}
}

func TestMarkKeepsGRPCCode(t *testing.T) {
	t.Parallel()
	err := retry.Terminal(status.Error(codes.AlreadyExists, "etcd data directory is not empty"))
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("code %v, want AlreadyExists", status.Code(err))
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	t.Run("transient then success", func(t *testing.T) {
		t.Parallel()
		n := 0
		err := retry.Do(t.Context(), p, func(context.Context) error {
			n++
			if n < 3 {
				return retry.Transient(errors.New("not yet"))
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Fatalf("err %v after %d calls, want nil after 3", err, n)
		}
	})
	t.Run("terminal stops at once", func(t *testing.T) {
		t.Parallel()
		n := 0
		err := retry.Do(t.Context(), p, func(context.Context) error { n++; return errors.New("refused") })
		if err == nil || n != 1 {
			t.Fatalf("err %v after %d calls, want an error after 1", err, n)
		}
	})
	t.Run("attempts bound", func(t *testing.T) {
		t.Parallel()
		n := 0
		p := p
		p.Attempts = 4
		err := retry.Do(t.Context(), p, func(context.Context) error { n++; return retry.Transient(errors.New("down")) })
		if err == nil || n != 4 || !retry.IsTransient(err) {
			t.Fatalf("err %v (transient %t) after %d calls, want a transient error after 4", err, retry.IsTransient(err), n)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		err := retry.Do(ctx, p, func(context.Context) error { return retry.Transient(errors.New("down")) })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want the context's deadline in it", err)
		}
	})
}

func TestBackoffCapped(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	for n := 1; n < 40; n++ {
		if d := p.Backoff(n); d <= 0 || d > 1200*time.Millisecond {
			t.Fatalf("Backoff(%d) = %v, want within (0, 1.2s]", n, d)
		}
	}
}
