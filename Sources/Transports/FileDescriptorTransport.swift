// H4 over a file descriptor: TCP, unix sockets, serial ttys, ptys and the BlueZ HCI
// socket all end up here. One reader thread per transport waits in poll(2) on the
// descriptor and on a wake-up pipe, so `close()` interrupts it on every kind of
// descriptor (a tty read does not return when another thread closes it).
// Framing is the pure `H4Framer`; this file only moves bytes. The thread starts when
// someone reads: `inbound` (a stream) or `deliver(on:_:)`, which hands each read's
// packets to the event loop as one batch and stops reading while 8 batches wait
// there (back-pressure). `sendNow` writes on the caller's thread, one write(2) per
// packet (on an HCI socket one write is one packet).

import Foundation
import HCI
import Logging
import NIOCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// errno as a sentence.
func errnoString(_ e: Int32) -> String { String(cString: strerror(e)) }

public final class FileDescriptorTransport: HCITransport {
    private let stream: AsyncThrowingStream<HCIPacket, any Error>
    private let continuation: AsyncThrowingStream<HCIPacket, any Error>.Continuation
    private let fd: Int32
    private let wake: (read: Int32, write: Int32)
    private let state = Mutex<State>(State())
    private let writeLock = Mutex(())
    private let label: String
    private let logger: Logger
    private let quickAck: Bool

    struct State {
        var closed = false
        var threadDone = false
        var fdClosed = false
        var started = false
        /// Set by `deliver(on:_:)`: where the reader hands packets.
        var target: (window: LoopWindow, receive: @Sendable (TransportInput) -> Void)?
    }

    /// Takes ownership of `fd` (closed by `close()`).
    /// - Parameters:
    ///   - quickAck: re-arm TCP_QUICKACK before each read (TCP peers that write a packet in
    ///     two segments, like Rootcanal, otherwise stall on the delayed ACK).
    public init(fd: Int32, label: String, quickAck: Bool = false, logger: Logger) throws {
        var p: [Int32] = [0, 0]
        guard pipe(&p) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TransportError.io(operation: "pipe", errno: e, reason: errnoString(e))
        }
        for w in p {
            _ = fcntl(w, F_SETFD, FD_CLOEXEC)
            _ = fcntl(w, F_SETFL, O_NONBLOCK)
        }
        self.fd = fd
        self.wake = (p[0], p[1])
        self.label = label
        self.logger = logger
        self.quickAck = quickAck
        (stream, continuation) = AsyncThrowingStream<HCIPacket, any Error>.makeStream(bufferingPolicy: .unbounded)
    }

    /// Packets as a stream (buffer: unbounded; prefer `deliver(on:_:)`, which pushes back).
    public var inbound: AsyncThrowingStream<HCIPacket, any Error> {
        startReading(nil)
        return stream
    }

    public func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        startReading((LoopWindow(loop: loop), receive))
    }

    private func startReading(_ target: (window: LoopWindow, receive: @Sendable (TransportInput) -> Void)?) {
        let start = state.withLock { s -> Bool in
            guard !s.started else { return false }
            s.started = true
            s.target = target
            return true
        }
        guard start else { return }
        if state.withLock({ $0.closed }) {
            // Closed before anyone read: the end is all there is.
            target.map { t in t.window.loop.execute { t.receive(.ended(nil)) } }
            return
        }
        let thread = Thread { [self] in self.readLoop() }
        thread.name = "hci-reader \(label)"
        thread.start()
    }

    /// Hands one read's packets over: to the loop (waiting while the window is full) or the stream.
    private func emit(_ packets: [HCIPacket]) {
        guard !packets.isEmpty else { return }
        if let t = state.withLock({ $0.target }) {
            t.window.hand { t.receive(.packets(packets)) }
        } else {
            for p in packets { continuation.yield(p) }
        }
    }

    private func end(_ error: (any Error)?) {
        if let t = state.withLock({ $0.target }) {
            t.window.loop.execute { t.receive(.ended(error)) }
        } else if let error {
            continuation.finish(throwing: error)
        } else {
            continuation.finish()
        }
    }

    deinit {
        // A transport dropped without close() (e.g. after the peer hung up) still
        // releases its descriptor; the reader thread holds `self`, so it has exited.
        if !state.withLock({ $0.fdClosed }) { Glibc.close(fd) }
        Glibc.close(wake.read)
        Glibc.close(wake.write)
    }

    private func readLoop() {
        var framer = H4Framer()
        var buffer = [UInt8](repeating: 0, count: 65_536 + 16)
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        var one: Int32 = 1
        loop: while true {
            fds[0].revents = 0
            fds[1].revents = 0
            let r = poll(&fds, 2, -1)
            if r < 0 {
                if errno == EINTR { continue }
                let e = errno
                fail(.io(operation: "poll \(label)", errno: e, reason: errnoString(e)))
                break
            }
            if fds[1].revents != 0 { break }  // close() woke us
            if quickAck { _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_QUICKACK, &one, socklen_t(MemoryLayout<Int32>.size)) }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                let e = errno
                fail(.io(operation: "read \(label)", errno: e, reason: errnoString(e)))
                break
            }
            if n == 0 {
                fail(.endOfStream)
                break
            }
            framer.append(buffer[0..<n])
            var packets: [HCIPacket] = []
            do {
                while let p = try framer.nextPacket() { packets.append(p) }
                emit(packets)
            } catch let e as DecodeError {
                emit(packets)
                fail(.framing(e))
                break loop
            } catch {
                break loop
            }
        }
        state.withLock { $0.threadDone = true }
    }

    private func fail(_ error: TransportError) {
        let first = state.withLock { s -> Bool in
            if s.closed { return false }
            s.closed = true
            return true
        }
        guard first else { return }
        logger.debug("transport failed", metadata: ["transport": "\(label)", "error": "\(error)"])
        end(error)
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    public func send(_ packet: HCIPacket) async throws { try sendNow([packet]) }

    public var sendsSynchronously: Bool { true }

    public func sendNow(_ packets: [HCIPacket]) throws {
        for p in packets { try write(p.h4Bytes) }
    }

    private func write(_ bytes: [UInt8]) throws {
        if state.withLock({ $0.closed }) { throw TransportError.closed }
        try writeLock.withLock { _ in
            var off = 0
            while off < bytes.count {
                let n = bytes[off...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    if errno == EAGAIN {
                        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                        _ = poll(&p, 1, 1000)
                        continue
                    }
                    let e = errno
                    throw TransportError.io(operation: "write \(label)", errno: e, reason: errnoString(e))
                }
                off += n
            }
        }
    }

    public func close() async {
        let first = state.withLock { s -> Bool in
            if s.closed { return false }
            s.closed = true
            return true
        }
        var b: UInt8 = 1
        _ = Glibc.write(wake.write, &b, 1)
        if first { end(nil) }
        // Wait (bounded) for the reader thread to leave poll before closing the fd it polls.
        for _ in 0..<200 where !state.withLock({ $0.threadDone }) { try? await Task.sleep(for: .milliseconds(5)) }
        writeLock.withLock { _ in
            let doClose = state.withLock { s -> Bool in
                defer { s.fdClosed = true }
                return !s.fdClosed
            }
            if doClose { _ = Glibc.close(fd) }
        }
    }
}
