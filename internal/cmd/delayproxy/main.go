// Command delayproxy forwards TCP connections with a fixed one-way delay
// in each direction, for the benchmarks' metadata-latency sweep (B2 of
// ../shared/reviews/2026-12-01b/benchmarks.md): the lab's kernel has no
// netem qdisc, so the file server's latency is added here, in front of
// its sshd, and only for its traffic.
//
//	go run ./internal/cmd/delayproxy -listen ADDR -to ADDR -delay D
//
// Every chunk read from one side is written to the other D after it
// arrived, in order, without waiting for the previous chunk's delay: a
// round trip pays 2·D, a stream keeps its bandwidth, as over a long link.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to listen on (host:port)")
	to := flag.String("to", "", "address to forward to (host:port)")
	delay := flag.Duration("delay", 0, "one-way delay added in each direction")
	flag.Parse()
	if *listen == "" || *to == "" || *delay < 0 {
		fmt.Fprintln(os.Stderr, "usage: delayproxy -listen ADDR -to ADDR -delay D")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		os.Exit(1)
	}
	serve(ln, *to, *delay)
}

// serve forwards every connection accepted on ln to to.
func serve(ln net.Listener, to string, delay time.Duration) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				return
			}
			done := make(chan struct{}, 2)
			go func() { pipe(s, c, delay); done <- struct{}{} }()
			go func() { pipe(c, s, delay); done <- struct{}{} }()
			<-done
			c.Close()
			s.Close()
			<-done
		}()
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk delay after it was read.
func pipe(dst io.Writer, src io.Reader, delay time.Duration) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			for range q { // let the reader end
			}
			return
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
