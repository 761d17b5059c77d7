package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// mergePatch applies an RFC 7386 JSON merge patch to a document.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("decoding the merge patch: %w", err)
	}
	return json.Marshal(mergeValue(d, p))
}

func mergeValue(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergeValue(tm[k], v)
	}
	return tm
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from"`
	Value json.RawMessage `json:"value"`
}

// decodeJSONPatch parses an RFC 6902 JSON patch.
func decodeJSONPatch(patch []byte) ([]jsonPatchOp, error) {
	var ops []jsonPatchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("decoding the JSON patch: %w", err)
	}
	for _, op := range ops {
		switch op.Op {
		case "add", "replace", "test":
			if op.Value == nil {
				return nil, fmt.Errorf("JSON patch operation %q at %q has no value", op.Op, op.Path)
			}
		case "remove", "move", "copy":
		default:
			return nil, fmt.Errorf("unknown JSON patch operation %q", op.Op)
		}
	}
	return ops, nil
}

// applyJSONPatch applies decoded JSON patch operations to a document.
func applyJSONPatch(doc []byte, ops []jsonPatchOp) ([]byte, error) {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	var err error
	for _, op := range ops {
		var val any
		if op.Value != nil {
			if err := json.Unmarshal(op.Value, &val); err != nil {
				return nil, fmt.Errorf("decoding the value of %q at %q: %w", op.Op, op.Path, err)
			}
		}
		switch op.Op {
		case "add":
			root, err = pointerSet(root, op.Path, val, true)
		case "replace":
			if _, err = pointerGet(root, op.Path); err == nil {
				root, err = pointerSet(root, op.Path, val, false)
			}
		case "remove":
			root, err = pointerRemove(root, op.Path)
		case "test":
			var got any
			if got, err = pointerGet(root, op.Path); err == nil && !reflect.DeepEqual(got, val) {
				err = fmt.Errorf("testing %q: the value differs", op.Path)
			}
		case "move", "copy":
			var v any
			if v, err = pointerGet(root, op.From); err != nil {
				break
			}
			if op.Op == "move" {
				if root, err = pointerRemove(root, op.From); err != nil {
					break
				}
			} else {
				v = deepCopyJSON(v)
			}
			root, err = pointerSet(root, op.Path, v, true)
		}
		if err != nil {
			return nil, fmt.Errorf("applying %q at %q: %w", op.Op, op.Path, err)
		}
	}
	return json.Marshal(root)
}

func deepCopyJSON(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// splitPointer splits an RFC 6901 JSON pointer into unescaped tokens.
func splitPointer(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("JSON pointer %q does not start with /", ptr)
	}
	toks := strings.Split(ptr[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func pointerGet(root any, ptr string) (any, error) {
	toks, err := splitPointer(ptr)
	if err != nil {
		return nil, err
	}
	cur := root
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, fmt.Errorf("no member %q", t)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("no element %q", t)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("no container at %q", t)
		}
	}
	return cur, nil
}

// pointerSet sets the value at ptr, inserting into arrays when insert is
// true ("add") and replacing otherwise. It returns the new root.
func pointerSet(root any, ptr string, val any, insert bool) (any, error) {
	toks, err := splitPointer(ptr)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return val, nil
	}
	parentPtr := "/" + strings.Join(escapeTokens(toks[:len(toks)-1]), "/")
	if len(toks) == 1 {
		parentPtr = ""
	}
	parent, err := pointerGet(root, parentPtr)
	if err != nil {
		return nil, err
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]any:
		p[last] = val
		return root, nil
	case []any:
		i := len(p)
		if last != "-" {
			if i, err = strconv.Atoi(last); err != nil || i < 0 || i > len(p) || (!insert && i == len(p)) {
				return nil, fmt.Errorf("no element %q", last)
			}
		}
		var next []any
		if insert {
			next = append(append(append([]any{}, p[:i]...), val), p[i:]...)
		} else {
			next = append([]any{}, p...)
			next[i] = val
		}
		if parentPtr == "" {
			return next, nil
		}
		return pointerSet(root, parentPtr, next, false)
	}
	return nil, errors.New("the parent is not a container")
}

func pointerRemove(root any, ptr string) (any, error) {
	toks, err := splitPointer(ptr)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, errors.New("cannot remove the whole document")
	}
	parentPtr := "/" + strings.Join(escapeTokens(toks[:len(toks)-1]), "/")
	if len(toks) == 1 {
		parentPtr = ""
	}
	parent, err := pointerGet(root, parentPtr)
	if err != nil {
		return nil, err
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]any:
		if _, ok := p[last]; !ok {
			return nil, fmt.Errorf("no member %q", last)
		}
		delete(p, last)
		return root, nil
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i < 0 || i >= len(p) {
			return nil, fmt.Errorf("no element %q", last)
		}
		next := append(append([]any{}, p[:i]...), p[i+1:]...)
		if parentPtr == "" {
			return next, nil
		}
		return pointerSet(root, parentPtr, next, false)
	}
	return nil, errors.New("the parent is not a container")
}

func escapeTokens(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
	}
	return out
}
