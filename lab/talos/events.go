package talos

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// event is a runtime event of a node's current boot.
type event struct {
	ev *machine.Event
	at time.Time
}

// eventTypePrefix prefixes the type URL of event payloads.
const eventTypePrefix = "talos/runtime/"

func newEvent(id, actorID string, payload proto.Message) (*machine.Event, error) {
	ev := &machine.Event{Id: id, ActorId: actorID}

	if payload != nil {
		data, err := proto.Marshal(payload)
		if err != nil {
			return nil, fmt.Errorf("encoding a %T event: %w", payload, err)
		}

		ev.Data = &anypb.Any{
			TypeUrl: eventTypePrefix + string(payload.ProtoReflect().Descriptor().FullName()),
			Value:   data,
		}
	}

	return ev, nil
}

// Events streams the runtime events of the node's current boot: first an
// empty event (the stream has started), then the requested backlog, then
// new events until the client goes away or the node goes down. Events the
// simulator emits: "boot", "reboot", "reset", "upgrade" and "shutdown"
// sequence events (a failed reset's STOP carries the error) and machine
// status events.
func (machineServer) Events(req *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	c := callOf(srv.Context())
	ctx := srv.Context()

	if err := srv.Send(&machine.Event{ActorId: req.GetWithActorId()}); err != nil {
		return err
	}

	if err := c.lock(); err != nil {
		return err
	}

	n := c.node
	stopped := n.inst.stopped
	backlog := tail(n.events, req)
	pos := len(n.events)
	wake := n.eventsCh
	c.unlock()

	send := func(evs []event) error {
		for _, e := range evs {
			if req.GetWithActorId() != "" && e.ev.GetActorId() != req.GetWithActorId() {
				continue
			}

			if err := srv.Send(e.ev); err != nil {
				return err
			}
		}

		return nil
	}

	if err := send(backlog); err != nil {
		return err
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-stopped:
			return status.Error(codes.Unavailable, "the node went down")
		case <-wake:
		}

		c.w.mu.Lock()

		if n.gen != c.gen {
			c.w.mu.Unlock()

			return status.Error(codes.Unavailable, "the node went down")
		}

		var fresh []event
		if pos < len(n.events) {
			fresh = append(fresh, n.events[pos:]...)
		}

		pos = len(n.events)
		wake = n.eventsCh
		c.w.mu.Unlock()

		if err := send(fresh); err != nil {
			return err
		}
	}
}

// tail picks the backlog an events request asks for.
func tail(events []event, req *machine.EventsRequest) []event {
	switch {
	case req.GetTailId() != "":
		for i, e := range events {
			if e.ev.GetId() == req.GetTailId() {
				return append([]event(nil), events[i+1:]...)
			}
		}

		return nil
	case req.GetTailSeconds() > 0:
		since := time.Now().Add(-time.Duration(req.GetTailSeconds()) * time.Second)

		var out []event

		for _, e := range events {
			if !e.at.Before(since) {
				out = append(out, e)
			}
		}

		return out
	case req.GetTailEvents() < 0:
		return append([]event(nil), events...)
	case req.GetTailEvents() > 0:
		start := max(0, len(events)-int(req.GetTailEvents()))

		return append([]event(nil), events[start:]...)
	default:
		return nil
	}
}
