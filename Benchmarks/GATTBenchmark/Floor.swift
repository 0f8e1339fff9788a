// The floor under part 2's CPU figures: what any host spends per ATT request on this
// transport when it does nothing but the system calls the exchange needs. One blocking
// thread writes raw H4 to a Rootcanal controller and reads until the response: the
// same packets cross the same socket as for our host and Bumble's (the request's ACL
// out; Number Of Completed Packets and the response's ACL in, each its own wake-up),
// with no event loop, no parsing beyond the headers and no allocation per request.

import BenchmarkSupport
import BLETesting
import Foundation
import HCI
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// Raw H4 over TCP: whole packets out of a byte buffer. Blocking reads, or (`polled`)
/// the system calls of an event loop: a non-blocking socket, a wait for readability
/// before each read (poll(2): Glibc's module has no epoll; the wake-up is the same) and
/// the ACKs `ChannelTransport` sends (`BoundedAck`): at once when the bytes read end
/// inside a packet, and then the next read without a wait, as the transport does; when
/// they end on a boundary and nothing was sent since, before the next wait, or 1 ms
/// later if another read ended on a boundary within 1 ms before.
struct RawH4 {
    let fd: Int32
    let polled: Bool
    private var buffer = [UInt8](repeating: 0, count: 4096)
    private var start = 0, end = 0
    /// Polled: a read ended on a boundary and nothing was sent since; when it is due.
    private var ackDue: ContinuousClock.Instant?
    /// Polled: when the last read that ended on a boundary did.
    private var lastBoundary: ContinuousClock.Instant?
    /// Polled: the last read ended inside a packet and was acknowledged, so the next
    /// read comes without a wait (the rest is usually there already).
    private var readAtOnce = false

    init?(port: UInt16, polled: Bool = false) {
        self.polled = polled
        guard let fd = connectToLoopback(port: port) else { return nil }
        self.fd = fd
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        // Every wait ends: a controller that stops answering ends the probe after 5 s.
        var limit = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        guard polled else { return }
        guard fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0 else { Glibc.close(fd); return nil }
    }

    func close() { _ = Glibc.close(fd) }

    mutating func send(_ bytes: [UInt8]) -> Bool {
        ackDue = nil
        return bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) == $0.count }
    }

    private func acknowledgeNow() {
        var acknowledgeNow: Int32 = 2
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_QUICKACK, &acknowledgeNow, socklen_t(MemoryLayout<Int32>.size))
    }

    /// The next whole packet: its H4 indicator and the range of its body (headers
    /// included) in `bytes`; nil when the socket ends, times out or the framing breaks.
    mutating func next() -> (type: UInt8, body: Range<Int>)? {
        while true {
            if end - start >= 1, let total = packetLength(at: start) {
                guard total > 0, total <= buffer.count else { return nil }
                if end - start >= total {
                    defer { start += total }
                    return (buffer[start], start + 1 ..< start + total)
                }
            }
            if start > 0 {
                buffer.withUnsafeMutableBytes { b in _ = memmove(b.baseAddress!, b.baseAddress! + start, end - start) }
                end -= start; start = 0
            }
            if polled {
                var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if let due = ackDue {
                    // Wait until the ACK is due (poll's 1 ms resolution), then send it.
                    let left = (due - .now) / .milliseconds(1)
                    if left <= 0 || Glibc.poll(&ready, 1, Int32(left.rounded(.up))) == 0 {
                        ackDue = nil
                        acknowledgeNow()
                    }
                }
                if ready.revents == 0, !readAtOnce { guard Glibc.poll(&ready, 1, 5000) == 1 else { return nil } }
            }
            let (socket, filled) = (fd, end)
            let got = buffer.withUnsafeMutableBytes { b in read(socket, b.baseAddress! + filled, b.count - filled) }
            if readAtOnce, got < 0, errno == EAGAIN {
                // Not here yet: wait for it as the loop then does.
                readAtOnce = false
                continue
            }
            readAtOnce = false
            guard got > 0 else { return nil }
            end += got
            if polled {
                if !endsOnBoundary() {
                    ackDue = nil
                    acknowledgeNow()
                    readAtOnce = true
                } else {
                    let now = ContinuousClock.now
                    let burst = lastBoundary.map { now - $0 < .milliseconds(1) } ?? false
                    lastBoundary = now
                    if ackDue == nil { ackDue = burst ? now + .milliseconds(1) : now }
                }
            }
        }
    }

    /// The whole length of the packet read from `i` on (indicator and headers included):
    /// nil while its header is incomplete, 0 for an indicator this probe does not know.
    func packetLength(at i: Int) -> Int? {
        let type = buffer[i]
        let header = type == 0x04 ? 2 : type == 0x02 ? 4 : 0
        guard header > 0 else { return 0 }
        guard end - i >= 1 + header else { return nil }
        return 1 + header + (type == 0x04 ? Int(buffer[i + 2]) : Int(buffer[i + 3]) | Int(buffer[i + 4]) << 8)
    }

    /// Whether the bytes read so far end where a packet ends.
    func endsOnBoundary() -> Bool {
        var i = start
        while i < end {
            guard let total = packetLength(at: i), total > 0 else { return false }
            i += total
        }
        return i == end
    }

    subscript(i: Int) -> UInt8 { buffer[i] }

    /// Sends a command and reads until its Command Complete or Command Status.
    mutating func command(_ opcode: HCIOpcode, _ parameters: [UInt8] = []) -> Bool {
        guard send(HCIPacket.command(opcode: opcode, parameters: parameters).h4Bytes) else { return false }
        while let p = next() {
            guard p.type == 0x04 else { continue }
            let code = self[p.body.lowerBound]
            if code == 0x0E, p.body.count >= 6, UInt16(self[p.body.lowerBound + 3]) | UInt16(self[p.body.lowerBound + 4]) << 8 == opcode.rawValue {
                return self[p.body.lowerBound + 5] == 0
            }
            if code == 0x0F, p.body.count >= 6, UInt16(self[p.body.lowerBound + 4]) | UInt16(self[p.body.lowerBound + 5]) << 8 == opcode.rawValue {
                return self[p.body.lowerBound + 2] == 0
            }
        }
        return false
    }
}

/// This thread's user + system CPU seconds.
func threadCPU() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(1 /* RUSAGE_THREAD */), &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

/// Connects a fresh Rootcanal controller to `target`, exchanges the MTU as our client
/// does, and times `n` reads and `n` writes of `handle` by raw H4 on this thread
/// (blocking, or with an event loop's system calls when `polled`): (wall, cpu) for each,
/// or nil when the controller or the peer does not answer. Then, when `burst` names a
/// value and its Client Characteristic Configuration, subscribes and times the burst
/// that starts (200 notifications of 200 bytes from the benchmark's Bumble server),
/// reading every fragment and reassembling nothing.
func floorRequests(port: UInt16, target: BluetoothAddress, handle: UInt16, burst: (value: UInt16, cccd: UInt16), n: Int,
                   polled: Bool = false) -> (read: (Double, Double), write: (Double, Double), notify: (figure: (Double, Double), bytes: Int)?)? {
    guard var h4 = RawH4(port: port, polled: polled) else { return nil }
    defer { h4.close() }
    guard h4.command(.reset),
          h4.command(HCIOpcode(rawValue: 0x0C01), [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F]),
          h4.command(LECreateConnection.opcode, LECreateConnection(peerAddressType: .random, peerAddress: target).parameters)
    else { return nil }
    var link: UInt16?
    while link == nil, let p = h4.next() {
        let b = p.body.lowerBound
        if p.type == 0x04, h4[b] == 0x3E, p.body.count >= 7, h4[b + 2] == 0x01 || h4[b + 2] == 0x0A {
            guard h4[b + 3] == 0 else { return nil }
            link = UInt16(h4[b + 4]) | UInt16(h4[b + 5]) << 8
        }
    }
    guard let link else { return nil }
    defer { _ = h4.send(HCIPacket.command(opcode: .disconnect, parameters: [UInt8(link & 0xFF), UInt8(link >> 8), 0x13]).h4Bytes) }
    let value = Array("benchmark!".utf8)
    func request(_ pdu: [UInt8]) -> [UInt8] {
        [0x02, UInt8(link & 0xFF), UInt8(link >> 8), UInt8(4 + pdu.count), 0, UInt8(pdu.count), 0, 0x04, 0x00] + pdu
    }
    // Exchange MTU (517, as ours asks), so notifications carry the whole 200-byte value.
    guard exchange(request([0x02, 0x05, 0x02]), answer: 0x03) else { return nil }
    let read = request([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)])
    let write = request([0x12, UInt8(handle & 0xFF), UInt8(handle >> 8)] + value)
    /// Sends one request and reads until its response (or an Error Response).
    func exchange(_ packet: [UInt8], answer: UInt8) -> Bool {
        guard h4.send(packet) else { return false }
        while let p = h4.next() {
            let b = p.body.lowerBound
            if p.type == 0x02, p.body.count >= 9, h4[b + 6] == 0x04, h4[b + 8] == answer || h4[b + 8] == 0x01 { return true }
        }
        return false
    }
    func time(_ packet: [UInt8], answer: UInt8) -> (Double, Double)? {
        for _ in 0..<3 { guard exchange(packet, answer: answer) else { return nil } }
        let t0 = ContinuousClock.now, c0 = threadCPU()
        for _ in 0..<n { guard exchange(packet, answer: answer) else { return nil } }
        return (seconds(ContinuousClock.now - t0), threadCPU() - c0)
    }
    guard let r = time(read, answer: 0x0B), let w = time(write, answer: 0x13) else { return nil }
    guard burst.value != 0 else { return (r, w, nil) }
    // Notifications: count the values' bytes from each first fragment's L2CAP length, and
    // read the continuing fragments of the last one too.
    let t0 = ContinuousClock.now, c0 = threadCPU()
    guard exchange(request([0x12, UInt8(burst.cccd & 0xFF), UInt8(burst.cccd >> 8), 0x01, 0x00]), answer: 0x13) else { return (r, w, nil) }
    var bytes = 0, left = 0
    while bytes < 200 * 200 || left > 0, let p = h4.next() {
        let b = p.body.lowerBound
        guard p.type == 0x02, p.body.count >= 4 else { continue }
        let fragment = p.body.count - 4
        if h4[b + 1] & 0x30 == 0x10 {  // continuing fragment
            left -= min(left, fragment)
        } else if p.body.count >= 11, h4[b + 6] == 0x04, h4[b + 8] == 0x1B {
            let length = Int(h4[b + 4]) | Int(h4[b + 5]) << 8
            bytes += length - 3
            left = length + 4 - fragment
        }
    }
    guard bytes >= 200 * 200 else { return (r, w, nil) }
    return (r, w, ((seconds(ContinuousClock.now - t0), threadCPU() - c0), bytes))
}

/// The floor under every figure with an idle wait in it: CPU per wake-up of a thread
/// that only sleeps `gap` in poll(2) and has nothing to do when it wakes. A packet that
/// finds the host asleep costs at least this; a read over Rootcanal has two such
/// packets (Number Of Completed Packets, then the response), and so does a write.
/// On a VM whose idle vCPUs halt, most of it is the vCPU's wake-up.
func idleWakeUpFloor(n: Int, gap: Duration) -> Double {
    let milliseconds = Int32(gap / .milliseconds(1))
    let c0 = cpu()
    for _ in 0..<n { _ = poll(nil, 0, milliseconds) }
    return (cpu() - c0) / Double(max(n, 1))
}

/// The same wake-up through an idle NIO event loop of its own: a task scheduled `gap`
/// ahead, `n` times in a chain, nothing else on the loop. Over the floor above, this
/// is what one turn of NIO's loop (timer heap, timerfd, epoll_wait, the task) adds when
/// it runs cold, before any channel, pipeline or protocol code.
func idleLoopWakeUpFloor(n: Int, gap: Duration) async throws -> Double {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let loop = group.next(), done = loop.makePromise(of: Void.self)
    @Sendable func wait(_ i: Int) {
        guard i < n else { done.succeed(); return }
        loop.scheduleTask(in: TimeAmount(gap)) { wait(i + 1) }
    }
    let c0 = cpu()
    loop.execute { wait(0) }
    try await done.futureResult.get()
    let used = cpu() - c0
    try await group.shutdownGracefully()
    return used / Double(max(n, 1))
}
