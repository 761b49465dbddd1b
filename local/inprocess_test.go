package local

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestActivatorHopIsInProcess: sless dev's activator reaches its
// instances' queue-proxies in memory: after requests, whose connections
// the activator keeps alive, no TCP connection has an end at the
// queue-proxy's serving port, which still answers over TCP.
func TestActivatorHopIsInProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the machine's TCP connections from /proc/net/tcp")
	}
	p := startPlatform(t, manifest("one", oneFn))
	p.waitFor("an instance ready", 2*time.Minute, func() bool { return p.status("one").Ready == 1 })
	for range 10 {
		if code, _, err := p.invoke("one", ""); code != 200 {
			t.Fatalf("invoke: %d %v", code, err)
		}
	}
	st := p.status("one")
	if len(st.Instances) != 1 {
		t.Fatalf("instances: %+v, want one", st.Instances)
	}
	addr := st.Instances[0].Addr
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if n := establishedAt(t, port); n != 0 {
		t.Errorf("%d TCP connections at the queue-proxy's serving port %s, want none", n, port)
	}
	resp, err := p.client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("the queue-proxy over TCP: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the queue-proxy over TCP: %d", resp.StatusCode)
	}
}

// establishedAt counts the established TCP connections on this machine
// with an end at port.
func establishedAt(t *testing.T, port string) int {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf(":%04X", p)
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st ...; st 01 is ESTABLISHED.
			fields := strings.Fields(sc.Text())
			if len(fields) > 3 && fields[3] == "01" &&
				(strings.HasSuffix(fields[1], suffix) || strings.HasSuffix(fields[2], suffix)) {
				n++
			}
		}
		f.Close()
	}
	return n
}
