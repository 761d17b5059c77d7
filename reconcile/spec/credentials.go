package spec

import "strings"

// Credentials checks the secrets a command needs to reach the provider
// (rule 22): the provider's credentials, a tailscale auth key when one is
// given, and the BMC logins of redfish metal machines. A missing, empty or
// still-placeholder value is a problem; no value is ever echoed.
func (c *Cluster) Credentials() []Problem {
	var out []Problem
	var notText map[string]bool
	need := func(key, value string) {
		switch {
		case notText[key]:
			out = append(out, Problem{File: SecretsFile, Key: key, Message: key + " must be a non-empty string"})
		case strings.TrimSpace(value) == "":
			out = append(out, Problem{File: SecretsFile, Key: key, Message: key + " is not set; put it in secrets.yaml"})
		case value == Placeholder:
			out = append(out, Problem{File: SecretsFile, Key: key, Message: key + " is still the scaffolded placeholder CHANGE-ME"})
		}
	}
	switch {
	case c.OpenStack != nil:
		notText = c.OpenStack.notText
		need("openstack.credential_id", c.OpenStack.CredentialID)
		need("openstack.credential_secret", c.OpenStack.CredentialSecret)
	case c.Proxmox != nil:
		notText = c.Proxmox.notText
		need("proxmox.token_id", c.Proxmox.TokenID)
		need("proxmox.token_secret", c.Proxmox.TokenSecret)
		if id := c.Proxmox.TokenID; id != "" && id != Placeholder && !validTokenID(id) {
			out = append(out, Problem{File: SecretsFile, Key: "proxmox.token_id", Message: "proxmox.token_id must look like user@realm!tokenname"})
		}
	}
	if ts := c.Tailscale; ts != nil && ts.badAuthKey {
		out = append(out, Problem{File: SecretsFile, Key: "tailscale.auth_key", Message: "tailscale.auth_key must be a non-empty string"})
	} else if ts != nil && ts.AuthKey == Placeholder {
		need("tailscale.auth_key", ts.AuthKey)
	}
	for _, g := range c.Metal {
		for _, s := range g.Servers {
			if !s.Redfish {
				continue
			}
			prefix := "metal." + g.Name + ".servers." + s.Name + ".bmc."
			need(prefix+"username", s.BMC.Username)
			need(prefix+"password", s.BMC.Password)
		}
	}
	return out
}

// validTokenID reports whether a Proxmox API token id has the
// user@realm!name shape.
func validTokenID(id string) bool {
	at := strings.Index(id, "@")
	bang := strings.LastIndex(id, "!")
	return at > 0 && bang > at+1 && bang < len(id)-1
}
