package gateway

import (
	"bufio"
	"context"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// FuzzOutboundHeaders feeds the proxy core arbitrary request headers (as
// net/http's server parses them) and checks what the upstream would get:
// no hop-by-hop header, none the client's Connection header names, the
// gateway's own forwarding headers, and the client's request untouched.
func FuzzOutboundHeaders(f *testing.F) {
	for _, s := range []string{
		"Host: a\r\n",
		"Host: a\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\n",
		"Host: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n",
		"Host: a\r\nConnection: Upgrade\r\nUpgrade: \x7f\r\n",
		"Host: a\r\nX-Forwarded-For: 1.2.3.4\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-Proto: gopher\r\nX-Forwarded-Host: evil\r\n",
		"Host: a\r\nTe: trailers, gzip\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\nProxy-Authorization: x\r\n",
		"Host: [::1]:80\r\nUser-Agent:\r\nConnection: ,, te ,\r\n",
	} {
		f.Add(s, "10.0.0.1:5555", false)
		f.Add(s, "[2001:db8::1]:5555", true)
	}
	up := &upstream{cfg: Upstream{Name: "pool", Scheme: "http"}}
	rt := &route{cfg: Route{Name: "r"}}
	f.Fuzz(func(t *testing.T, header, remote string, trusted bool) {
		in, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET /p?q=1;x=%zz HTTP/1.1\r\n" + header + "\r\n")))
		if err != nil {
			return
		}
		in.RemoteAddr = remote
		before := in.Header.Clone()
		lis := &listenerRoute{name: "public"}
		if trusted {
			lis.trusted = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		}
		out, err := rt.outbound(context.Background(), in, lis, up)
		if !equalHeaders(before, in.Header) {
			t.Fatalf("the client's header changed: %v, then %v", before, in.Header)
		}
		if err != nil {
			if upgradeType(in.Header) == "" || printable(upgradeType(in.Header)) {
				t.Fatalf("refused a request that does not ask for an unprintable protocol: %v", err)
			}
			return
		}
		switchTo := upgradeType(in.Header)
		for _, k := range []string{"Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Transfer-Encoding", "Trailer"} {
			if _, ok := out.Header[k]; ok {
				t.Fatalf("hop-by-hop header %s sent upstream: %v", k, out.Header)
			}
		}
		if switchTo == "" {
			if _, ok := out.Header["Connection"]; ok {
				t.Fatalf("Connection sent upstream without an upgrade: %v", out.Header)
			}
			if _, ok := out.Header["Upgrade"]; ok {
				t.Fatalf("Upgrade sent upstream without Connection: Upgrade: %v", out.Header)
			}
		}
		for _, name := range connectionTokens(in.Header) {
			if name == "Upgrade" && switchTo != "" {
				continue
			}
			if _, ok := out.Header[name]; ok && !slices.Contains([]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "User-Agent", "Te"}, name) {
				t.Fatalf("header %s, named by the client's Connection, sent upstream: %v", name, out.Header)
			}
		}
		if te := out.Header["Te"]; len(te) > 0 && (len(te) != 1 || te[0] != "trailers") {
			t.Fatalf("Te sent as %q, want only trailers", te)
		}
		xff := out.Header["X-Forwarded-For"]
		if len(xff) != 1 {
			t.Fatalf("X-Forwarded-For %q, want one value", xff)
		}
		client := clientAddress(&http.Request{RemoteAddr: remote}, nil)
		if !strings.HasSuffix(xff[0], client) {
			t.Fatalf("X-Forwarded-For %q does not end with the client %q", xff[0], client)
		}
		if !trusted && xff[0] != client {
			t.Fatalf("from an untrusted client, X-Forwarded-For %q, want only %q", xff[0], client)
		}
		if p := out.Header.Get("X-Forwarded-Proto"); p != "http" && p != "https" {
			t.Fatalf("X-Forwarded-Proto %q", p)
		}
		if _, ok := out.Header["Forwarded"]; ok && !trusted {
			t.Fatalf("a Forwarded header from an untrusted client went upstream: %v", out.Header)
		}
		if out.URL.Host != "pool" || out.URL.Scheme != "http" || out.Host != in.Host {
			t.Fatalf("URL %v, Host %q: want the upstream's name and the client's Host", out.URL, out.Host)
		}
		if strings.Contains(out.URL.RawQuery, ";") {
			t.Fatalf("query %q sent with a ';' that servers read differently", out.URL.RawQuery)
		}
	})
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, vs := range a {
		if !slices.Equal(vs, b[k]) {
			return false
		}
	}
	return true
}
