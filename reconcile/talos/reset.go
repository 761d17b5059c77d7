package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// ErrResetNotStarted is returned when the node did not take the reset
// (the call failed, or another sequence runs): nothing happened on it.
var ErrResetNotStarted = errors.New("the reset did not start")

// ErrResetFailed is returned when a node reports that its reset sequence
// stopped with an error: the node is still up, half-reset (cordoned, its
// kubelet stopped) and, on a control plane, possibly still an etcd member.
var ErrResetFailed = errors.New("the reset failed")

// Reset resets a node and waits, bounded by ctx, until its reset sequence
// ends. graceful makes Talos cordon and drain the node and, on a control
// plane, leave etcd before it wipes the system disk (Talos treats a
// failed leave as fatal). The node powers off afterwards (no reboot), so
// it cannot come back on its own.
//
// The outcome is read from the node's events for the reset's actor: the
// sequence's stop event, with or without an error. When the event stream
// ends without one (the node went down while wiping), the reset is taken
// as done only if the node no longer answers; a node that still answers
// without a stop event after ctx ends is a timeout.
func (c *Client) Reset(ctx context.Context, node string, graceful bool) error {
	cctx, cancel := call(ctx, node)
	resp, err := c.c.ResetGenericWithResponse(cctx, &machineapi.ResetRequest{
		Graceful: graceful,
		Reboot:   false,
		Mode:     machineapi.ResetRequest_ALL,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("resetting %s: %w: %w", node, ErrResetNotStarted, classify(err))
	}
	actor := ""
	for _, m := range resp.GetMessages() {
		if m.GetActorId() != "" {
			actor = m.GetActorId()
		}
	}
	if actor == "" {
		return fmt.Errorf("resetting %s: %w: the node accepted the reset without naming its sequence, so its outcome cannot be followed", node, ErrResetNotStarted)
	}
	return c.followReset(ctx, node, actor)
}

// followReset reads the events of the reset's actor until the sequence
// stops.
func (c *Client) followReset(ctx context.Context, node, actor string) error {
	sctx, cancel := context.WithCancel(client.WithNode(ctx, node))
	defer cancel()
	stream, err := c.c.Events(sctx, client.WithActorID(actor), client.WithTailEvents(-1))
	if err == nil {
		for {
			ev, rerr := stream.Recv()
			if rerr != nil {
				err = rerr
				break
			}
			seq := &machineapi.SequenceEvent{}
			if ev.GetData() == nil || !ev.GetData().MessageIs(seq) {
				continue
			}
			if ev.GetData().UnmarshalTo(seq) != nil || seq.GetSequence() != "reset" || seq.GetAction() != machineapi.SequenceEvent_STOP {
				continue
			}
			if e := seq.GetError(); e != nil && e.GetMessage() != "" {
				return fmt.Errorf("resetting %s: %w: %s", node, ErrResetFailed, e.GetMessage())
			}
			return nil
		}
	}
	// The stream ended without a stop event: the node went away while
	// resetting, the stream broke, or the time ran out. Only a node that
	// no longer answers has finished its reset (a failed reset leaves it
	// up); it is asked once more, under a bound of its own.
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer pcancel()
	if _, verr := c.Version(pctx, node); verr != nil && Unreachable(verr) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("resetting %s: no end of the reset was seen: %w", node, context.Cause(ctx))
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the event stream ended")
	}
	return fmt.Errorf("resetting %s: lost the reset's events (%v) and the node still answers", node, err)
}

// RemoveMember removes an etcd member by its id through the etcd of the
// control plane node (another member). etcd refuses it when the members
// that remain could not keep a majority.
func (c *Client) RemoveMember(ctx context.Context, node string, id uint64) error {
	ctx, cancel := call(ctx, node)
	defer cancel()
	if err := c.c.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: id}); err != nil {
		return fmt.Errorf("removing etcd member %x through %s: %w", id, node, classify(err))
	}
	return nil
}

// ResetOnce resets a node unless a reset of it is already running (an
// earlier run began it and was interrupted): then it follows that one to
// its end instead of asking for a second.
func (c *Client) ResetOnce(ctx context.Context, node string, graceful bool) error {
	if actor := c.runningReset(ctx, node); actor != "" {
		return c.followReset(ctx, node, actor)
	}
	return c.Reset(ctx, node, graceful)
}

// backlogIdle is how long the event backlog may stay silent before it is
// taken as read.
const backlogIdle = 500 * time.Millisecond

// runningReset returns the actor of a reset sequence the node started and
// has not stopped, from the events it still keeps; "" when there is none
// or the events cannot be read (then a new reset is asked for, which a
// node busy resetting refuses).
func (c *Client) runningReset(ctx context.Context, node string) string {
	sctx, cancel := context.WithTimeout(client.WithNode(ctx, node), CallTimeout)
	defer cancel()
	stream, err := c.c.Events(sctx, client.WithTailEvents(-1))
	if err != nil {
		return ""
	}
	events := make(chan *machineapi.Event)
	go func() {
		defer close(events)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case events <- ev:
			case <-sctx.Done():
				return
			}
		}
	}()
	running := map[string]bool{}
	idle := time.NewTimer(backlogIdle)
	defer idle.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return lastRunning(running)
			}
			seq := &machineapi.SequenceEvent{}
			if ev.GetData() != nil && ev.GetData().MessageIs(seq) && ev.GetData().UnmarshalTo(seq) == nil && seq.GetSequence() == "reset" {
				running[ev.GetActorId()] = seq.GetAction() == machineapi.SequenceEvent_START
			}
			idle.Reset(backlogIdle)
		case <-idle.C:
			return lastRunning(running)
		case <-sctx.Done():
			return lastRunning(running)
		}
	}
}

func lastRunning(running map[string]bool) string {
	for actor, yes := range running {
		if yes && actor != "" {
			return actor
		}
	}
	return ""
}
