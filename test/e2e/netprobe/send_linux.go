package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// forgedSource is the source address of the forged datagram: TEST-NET-2,
// nobody's.
var forgedSource = [4]byte{198, 51, 100, 77}

// send sends tag to each host by every means root has and reports which
// got an answer. tcpPort and udpPort are where the simulated internet
// listens.
func send(tag string, ports []string, hosts []string) map[string]string {
	res := map[string]string{}
	var tcpPort, udpPort int
	fmt.Sscan(ports[0], &tcpPort) //nolint:errcheck
	fmt.Sscan(ports[1], &udpPort) //nolint:errcheck
	for _, h := range hosts {
		ip := net.ParseIP(h).To4()
		if ip == nil {
			res[h] = "error: not an IPv4 address"
			continue
		}
		dst := [4]byte(ip)
		res["tcp "+h] = tcpProbe(h, tcpPort, tag)
		res["udp "+h] = outcome("sent", udpProbe(h, udpPort, tag))
		res["icmp "+h] = rawICMP(dst, tag)
		res["syn "+h] = rawSYN(dst, uint16(tcpPort), tag)
		res["proto253 "+h] = outcome("sent", rawSend(253, dst, []byte(tag)))
		res["forged "+h] = outcome("sent", forgedUDP(dst, uint16(udpPort), tag))
	}
	return res
}

func tcpProbe(host string, port int, tag string) string {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, fmt.Sprint(port)), 2*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.Write([]byte(tag))                               //nolint:errcheck
	c.SetReadDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck
	b := make([]byte, 16)
	n, _ := c.Read(b)
	return fmt.Sprintf("connected, read %q", b[:n])
}

func udpProbe(host string, port int, tag string) error {
	c, err := net.Dial("udp4", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		if _, err := c.Write([]byte(tag)); err != nil {
			return err
		}
	}
	return nil
}

// rawSocket opens an IPv4 raw socket for proto with a receive timeout.
func rawSocket(proto int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, proto)
	if err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval(int64(1500 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv) //nolint:errcheck
	return fd, nil
}

func rawSend(proto int, dst [4]byte, payload []byte) error {
	fd, err := rawSocket(proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, payload, 0, &unix.SockaddrInet4{Addr: dst})
}

// rawICMP sends an echo request carrying tag and waits for the reply.
func rawICMP(dst [4]byte, tag string) string {
	fd, err := rawSocket(unix.IPPROTO_ICMP)
	if err != nil {
		return "error: " + err.Error()
	}
	defer unix.Close(fd)
	msg := append([]byte{8, 0, 0, 0, 0x4d, 0x54, 0, 1}, tag...)
	binary.BigEndian.PutUint16(msg[2:], checksum(msg))
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrInet4{Addr: dst}); err != nil {
		return "error: " + err.Error()
	}
	return awaitReply(fd, dst, func(p []byte) bool { return len(p) > 0 && p[0] == 0 })
}

// awaitReply reads the raw socket fd until a packet from src whose
// transport part satisfies match arrives, or the receive timeout.
func awaitReply(fd int, src [4]byte, match func([]byte) bool) string {
	buf := make([]byte, 2048)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return "no reply"
		}
		f, ok := from.(*unix.SockaddrInet4)
		if !ok || f.Addr != src || n < 20 {
			continue
		}
		if ihl := int(buf[0]&15) * 4; n > ihl && match(buf[ihl:n]) {
			return "reply"
		}
	}
	return "no reply"
}

// rawSYN sends a TCP SYN carrying tag as data, built by hand on a raw
// socket, and waits for a SYN-ACK.
func rawSYN(dst [4]byte, port uint16, tag string) string {
	src, err := localAddr(dst)
	if err != nil {
		return "error: " + err.Error()
	}
	fd, err := rawSocket(unix.IPPROTO_TCP)
	if err != nil {
		return "error: " + err.Error()
	}
	defer unix.Close(fd)
	sport := uint16(40000 + rand.IntN(20000))
	seg := make([]byte, 20, 20+len(tag))
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], port)
	binary.BigEndian.PutUint32(seg[4:], rand.Uint32())
	seg[12], seg[13] = 5<<4, 0x02 // data offset 5 words; SYN
	binary.BigEndian.PutUint16(seg[14:], 65535)
	seg = append(seg, tag...)
	binary.BigEndian.PutUint16(seg[16:], checksum(pseudoHeader(src, dst, unix.IPPROTO_TCP, seg)))
	if err := unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: dst}); err != nil {
		return "error: " + err.Error()
	}
	return awaitReply(fd, dst, func(p []byte) bool {
		return len(p) >= 14 && binary.BigEndian.Uint16(p[2:]) == sport && p[13]&0x12 == 0x12
	})
}

// forgedUDP sends a UDP datagram carrying tag from forgedSource, IP header
// and all written by hand (IPPROTO_RAW implies IP_HDRINCL).
func forgedUDP(dst [4]byte, port uint16, tag string) error {
	fd, err := rawSocket(unix.IPPROTO_RAW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	udp := make([]byte, 8, 8+len(tag))
	binary.BigEndian.PutUint16(udp[0:], 53)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(tag)))
	udp = append(udp, tag...)
	binary.BigEndian.PutUint16(udp[6:], checksum(pseudoHeader(forgedSource, dst, unix.IPPROTO_UDP, udp)))
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	copy(ip[12:], forgedSource[:])
	copy(ip[16:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	return unix.Sendto(fd, append(ip, udp...), 0, &unix.SockaddrInet4{Addr: dst})
}

// localAddr is the source address the kernel picks toward dst.
func localAddr(dst [4]byte) ([4]byte, error) {
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IP(dst[:]), Port: 9})
	if err != nil {
		return [4]byte{}, err
	}
	defer c.Close()
	return [4]byte(c.LocalAddr().(*net.UDPAddr).IP.To4()), nil
}

func pseudoHeader(src, dst [4]byte, proto byte, seg []byte) []byte {
	p := append(append(append([]byte{}, src[:]...), dst[:]...), 0, proto, byte(len(seg)>>8), byte(len(seg)))
	return append(p, seg...)
}

// checksum is the Internet checksum (RFC 1071).
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
