package forge

import (
	"net/http"
	"time"
)

func (f *Forge) getAuthenticatedUser(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := c.userDoc(c.user.Login)
	u.Name, u.Email = c.user.Name, c.user.Email
	return reply(http.StatusOK, u)
}

func (f *Forge) getUser(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	login := c.param("login")
	if f.lookupUser(login) == nil {
		known := false
		for _, r := range f.order {
			if r.owner == login {
				known = true
			}
		}
		if !known {
			return notFound()
		}
	}
	return reply(http.StatusOK, c.userDoc(login))
}

func (f *Forge) getRateLimit(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	c.user.roll(time.Now())
	core := rateJSON{
		Limit:     f.limit,
		Remaining: max(f.limit-c.user.used, 0),
		Reset:     c.user.reset.Unix(),
		Used:      min(c.user.used, f.limit),
		Resource:  "core",
	}
	return reply(http.StatusOK, rateLimitJSON{Resources: map[string]rateJSON{"core": core}, Rate: core})
}

func (f *Forge) getRepo(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	doc := c.repoDoc(c.repo, true)
	p := c.repo.permission(c.user.Login).rank()
	doc.Permissions = &repoPermsJSON{
		Admin: p >= PermissionAdmin.rank(),
		Push:  p >= PermissionWrite.rank(),
		Pull:  true,
	}
	return reply(http.StatusOK, doc)
}

func (f *Forge) getPermission(c *call) *response {
	f.mu.Lock()
	defer f.mu.Unlock()
	login := c.param("user")
	a := f.lookupUser(login)
	if a == nil {
		return fail(http.StatusNotFound, login+" is not a user")
	}
	p := c.repo.permission(a.Login)
	return reply(http.StatusOK, permissionJSON{Permission: string(p), RoleName: string(p), User: c.userDoc(a.Login)})
}
