package lockbench

import "net"

// FreePort returns a TCP port of 127.0.0.1 that was free when asked, for a
// peer system's server to listen on (etcdpeer's members, redispeer's
// server). Another process may take it in between: the server's listen
// then fails, and so does its run.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
