// Command idleconns opens n keep-alive connections to an HTTP server, sends
// one request on each (so the server holds them as idle keep-alive
// connections), holds them for a while and closes them: bench/gateway/run.sh
// measures a proxy's memory meanwhile.
//
//	idleconns -addr 127.0.0.1:9400 -n 10000 -hold 3s
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9400", "server address")
	n := flag.Int("n", 10000, "connections")
	hold := flag.Duration("hold", 3*time.Second, "how long to hold them idle")
	flag.Parse()
	conns := make([]net.Conn, 0, *n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range *n {
		c, err := net.DialTimeout("tcp", *addr, 5*time.Second)
		if err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", *addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	time.Sleep(*hold)
	fmt.Printf("%d idle keep-alive connections\n", len(conns))
}
