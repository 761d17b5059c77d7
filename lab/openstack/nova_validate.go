package openstack

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Messages of Nova's JSON-schema validation (nova/api/validation
// validators.py with jsonschema 4's wording).

// invalidField is "Invalid input for field/attribute <field>. Value:
// <value>. <message>", Nova's body validation error.
func invalidField(field, value, message string) string {
	return fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. %s", field, value, message)
}

// pyRepr is Python's repr of a string.
func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	r := strings.ReplaceAll(s, `\`, `\\`)
	if q == "'" {
		r = strings.ReplaceAll(r, "'", `\'`)
	}
	return q + r + q
}

// pyList is Python's repr of a list of strings.
func pyList(items []string) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = pyRepr(it)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// jsonValue stands for Python's str() of a JSON object or list in a
// validation message (the emulator writes it as JSON).
func jsonValue(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// maxServerTags and maxTagLength are Nova's limits (objects/instance.py
// MAX_TAG_COUNT, objects/tag.py MAX_TAG_LENGTH).
const (
	maxServerTags = 50
	maxTagLength  = 60
)

// tagError validates one tag as parameter_types.tag; field is the name
// Nova's message uses (the tag's index in a list).
func tagError(field, tag string) string {
	switch {
	case tag == "":
		return invalidField(field, tag, pyRepr(tag)+" should be non-empty")
	case len([]rune(tag)) > maxTagLength:
		return invalidField(field, tag, pyRepr(tag)+" is too long")
	case strings.ContainsAny(tag, ",/"):
		return invalidField(field, tag, pyRepr(tag)+" does not match '^[^,/]*$'")
	}
	return ""
}

// tagsError validates a list of tags as Nova's create and PUT tags schemas.
func tagsError(tags []string) string {
	if len(tags) > maxServerTags {
		return invalidField("tags", pyList(tags), pyList(tags)+" is too long")
	}
	for i, t := range tags {
		if msg := tagError(fmt.Sprint(i), t); msg != "" {
			return msg
		}
	}
	return ""
}

// invalidNameMessage is exception.InvalidName for the "name" format.
const invalidNameMessage = "An invalid 'name' value was provided. The name must be: printable characters. Can not start or end with whitespace."

// validName is parameter_types' "name" format: printable, no leading or
// trailing whitespace.
func validName(name string) bool {
	if name == "" {
		return true
	}
	r := []rune(name)
	if unicode.IsSpace(r[0]) || unicode.IsSpace(r[len(r)-1]) {
		return false
	}
	for _, c := range r {
		if !unicode.IsPrint(c) && c != ' ' {
			return false
		}
	}
	return true
}

var uuidRE = regexp.MustCompile(`^(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`)

// isUUID is oslo's is_uuid_like as far as the forms clients send.
func isUUID(s string) bool { return uuidRE.MatchString(s) }

// decodeUserData decodes user data as oslo_serialization's
// base64.decode_as_bytes (Python's non-strict b64decode): characters
// outside the alphabet are skipped, decoding stops at the padding that
// completes a quantum, and an incomplete quantum is an error.
func decodeUserData(s string) ([]byte, bool) {
	var data []byte
	pads, padded := 0, false
	for i := 0; i < len(s) && !padded; i++ {
		c := s[i]
		switch {
		case c == '=':
			q := len(data) % 4
			pads++
			padded = q >= 2 && q+pads >= 4
		case (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/':
			data = append(data, c)
		}
	}
	if len(data)%4 != 0 && !padded {
		return nil, false
	}
	out, err := base64.RawStdEncoding.DecodeString(string(data))
	return out, err == nil
}

// sanitizeHostname is nova.utils.sanitize_hostname, the default
// OS-EXT-SRV-ATTR:hostname of a server.
func sanitizeHostname(name, id string) string {
	h := strings.ToLower(name)
	h = regexp.MustCompile(`[ _.]`).ReplaceAllString(h, "-")
	h = regexp.MustCompile(`[^\w.-]+`).ReplaceAllString(h, "")
	h = strings.Trim(h, ".-")
	if len(h) > 63 {
		h = strings.Trim(h[:63], ".-")
	}
	if h == "" {
		h = "server-" + id
	}
	return h
}
