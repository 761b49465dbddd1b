package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sless.dev/sless/internal/wire"
)

// adminClient is the CLI's one way to the admin API of `sless dev` (or an
// activator): the base URL, and the token from SLESS_ADMIN_TOKEN.
type adminClient struct {
	base, token string
	http        *http.Client
	output      string          // "" (tables) or "json"
	ctx         context.Context // the command's: Ctrl-C ends its calls
}

// adminFlags adds --admin and -o to a command and returns its client.
func adminFlags(cmd *cobra.Command) *adminClient {
	c := &adminClient{token: os.Getenv("SLESS_ADMIN_TOKEN"), http: &http.Client{Timeout: 30 * time.Second}}
	def := "http://127.0.0.1:9090"
	if v := os.Getenv("SLESS_ADMIN"); v != "" {
		def = v
	}
	cmd.Flags().StringVar(&c.base, "admin", def, "the admin API's base URL (default $SLESS_ADMIN or the local sless dev)")
	cmd.Flags().StringVarP(&c.output, "output", "o", "", "json for the API's JSON instead of a table")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		c.ctx = cmd.Context()
		if c.output != "" && c.output != "json" {
			return fmt.Errorf("-o must be json, not %q", c.output)
		}
		token, err := adminToken(c.token)
		if err != nil {
			return err
		}
		c.token = token
		base, err := adminBase(c.base)
		if err != nil {
			return err
		}
		c.base = base
		return nil
	}
	return c
}

// adminBase is --admin as a base URL: host:port alone is http://host:port,
// as the server commands' own --admin flags take it. A host without a
// port (it would be port 80, seldom the admin API's) or a path (the API's
// own come after it) is refused, not guessed at.
func adminBase(flag string) (string, error) {
	base := flag
	schemeless := !strings.Contains(base, "://")
	if schemeless {
		base = "http://" + base
	}
	base = strings.TrimRight(base, "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" ||
		u.Path != "" || schemeless && u.Port() == "" {
		return "", fmt.Errorf("--admin %q: want host:port or http(s)://host[:port], without a path", flag)
	}
	return base, nil
}

// adminToken is SLESS_ADMIN_TOKEN without the space around it (a file's
// or a decoded Secret's last newline); one with a space or a control
// character inside cannot be sent, and is said to be wrong.
func adminToken(env string) (string, error) {
	token := strings.TrimSpace(env)
	if i := strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return "", fmt.Errorf("SLESS_ADMIN_TOKEN has a space or control character at byte %d: it should hold the token alone", i)
	}
	return token, nil
}

// get fetches path and decodes its JSON into v; raw is the body.
func (c *adminClient) get(path string, v any) (raw []byte, err error) {
	resp, err := c.do(path, c.http)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the admin API's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return raw, c.apiError(resp.StatusCode, raw)
	}
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			return raw, fmt.Errorf("the admin API's answer: %w", err)
		}
	}
	return raw, nil
}

// do sends a GET of path, with the token.
func (c *adminClient) do(path string, hc *http.Client) (*http.Response, error) {
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, usageError{fmt.Errorf("--admin %s: %w", c.base, err)}
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach the sless admin API at %s: is `sless dev` running? (%w)", c.base, err)
	}
	if resp.Header.Get(wire.AdminAPIHeader) == "" {
		resp.Body.Close()
		return nil, fmt.Errorf("%s is not the sless admin API (it answered %s): is it the invocation port? "+
			"--admin wants the admin port (127.0.0.1:9090 under `sless dev`)", c.base, resp.Status)
	}
	return resp, nil
}

// apiError says what an answer other than 200 means.
func (c *adminClient) apiError(code int, body []byte) error {
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	switch {
	case code == http.StatusUnauthorized && c.token != "":
		return errors.New("the admin API refused the token in SLESS_ADMIN_TOKEN")
	case code == http.StatusUnauthorized:
		return errors.New("the admin API needs a token: set SLESS_ADMIN_TOKEN")
	case e.Error != "":
		return errors.New(e.Error)
	default:
		return fmt.Errorf("the admin API answered %d: %s", code, strings.TrimSpace(string(body)))
	}
}

// functionPath is the admin API's path of ns/name; a bare name is in the
// default namespace.
func functionPath(arg string) (ns, name, path string) {
	ns, name, ok := strings.Cut(arg, "/")
	if !ok {
		ns, name = "default", arg
	}
	return ns, name, "/v1/namespaces/" + url.PathEscape(ns) + "/functions/" + url.PathEscape(name)
}
