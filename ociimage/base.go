package ociimage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"sless.dev/sless/internal/wire"
)

// NonRoot is the user sless images run as (wire.NonRootUID).
const NonRoot = wire.NonRootUID

// NonRootUser is NonRoot as an image's User.
var NonRootUser = strconv.Itoa(NonRoot) + ":" + strconv.Itoa(NonRoot)

// caBundle is where Debian keeps the system's certificate authorities, and
// where Go's crypto/x509 and most runtimes look for them.
const caBundle = "etc/ssl/certs/ca-certificates.crt"

// AddSystem adds what a minimal Linux userland needs beside a program:
// root and the non-root user in /etc/passwd and /etc/group, their homes, a
// /tmp anyone may write, and this machine's certificate authorities (when
// it has them) so that TLS to brokers and registries verifies.
func AddSystem(t *Tree) error {
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot),
		"etc/group":         fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot),
		"etc/nsswitch.conf": "hosts: files dns\n",
	}
	for name, content := range files {
		if err := t.AddFile(name, 0o644, []byte(content)); err != nil {
			return err
		}
	}
	if err := t.AddDir("tmp", 0o777|fs.ModeSticky); err != nil {
		return err
	}
	if err := t.AddDir("root", 0o700); err != nil {
		return err
	}
	if err := t.AddDir("home/nonroot", 0o700); err != nil {
		return err
	}
	if err := t.Chown("home/nonroot", NonRoot, NonRoot); err != nil {
		return err
	}
	ca, err := os.ReadFile("/" + caBundle)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("certificate authorities: %w", err)
	}
	return t.AddFile(caBundle, 0o644, ca)
}

// Static is the base of static programs (the sless binary, Go functions):
// the system files of AddSystem and nothing else, run as NonRoot.
func Static() (v1.Image, error) {
	var t Tree
	if err := AddSystem(&t); err != nil {
		return nil, err
	}
	layer, err := t.Layer()
	if err != nil {
		return nil, err
	}
	return Build(Empty(), Config{User: NonRootUser, WorkingDir: "/", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, layer)
}
