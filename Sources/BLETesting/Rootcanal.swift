// Starts Android's Rootcanal virtual controller for live tests and the demo: four
// free loopback ports (test, HCI, link, LE link), waits until the HCI port accepts,
// and stops the process on `stop()` or deinit. Rootcanal 1.10.0 listens on every
// interface with no flag to change that; we only ever connect to 127.0.0.1.
//
// A free port can be taken between the moment we find it and the moment Rootcanal
// binds it (tests start Rootcanals and connections in parallel). Rootcanal then logs
// "Address already in use" and runs on without that listener, and the port accepts,
// for someone else's process: a test would talk to another test's controller. So the
// HCI port counts as ready only when the listening socket is this Rootcanal's
// (/proc/net/tcp's inode among /proc/PID/fd), and a launch whose port went elsewhere
// (another listener, or a connection's local end, which makes the bind fail) starts
// again on fresh ports.

import Foundation
import HCI
#if canImport(Glibc)
import Glibc
#endif

public final class RootcanalProcess: @unchecked Sendable {
    public let hciPort: UInt16
    public let binary: String
    private let process: Process
    private let lock = NSLock()
    private let started = ContinuousClock.now

    public enum LaunchError: Error, CustomStringConvertible {
        case notFound(searched: [String])
        case didNotStart(String)
        /// Another process took the HCI port before Rootcanal bound it.
        case portTaken(UInt16)
        public var description: String {
            switch self {
            case let .notFound(s):
                return "rootcanal not found (set ROOTCANAL, or run Scripts/setup.sh to create .venv); searched: \(s.joined(separator: ", "))"
            case let .didNotStart(why): return "rootcanal did not start: \(why)"
            case let .portTaken(port): return "rootcanal did not start: another process holds its HCI port \(port)"
            }
        }
    }

    /// `$ROOTCANAL`, else the binary inside `<root>/.venv`'s rootcanal package.
    public static func locate(packageRoot: String) throws -> String {
        var searched: [String] = []
        if let env = ProcessInfo.processInfo.environment["ROOTCANAL"] {
            if FileManager.default.isExecutableFile(atPath: env) { return env }
            searched.append(env)
        }
        let lib = packageRoot + "/.venv/lib"
        let pythons = (try? FileManager.default.contentsOfDirectory(atPath: lib)) ?? []
        for py in pythons.sorted() where py.hasPrefix("python") {
            let p = "\(lib)/\(py)/site-packages/rootcanal/bin/linux-x86_64/rootcanal"
            if FileManager.default.isExecutableFile(atPath: p) { return p }
            searched.append(p)
        }
        if searched.isEmpty { searched.append(lib) }
        throw LaunchError.notFound(searched: searched)
    }

    /// A TCP port on 127.0.0.1 that was free a moment ago.
    public static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LaunchError.didNotStart("socket: \(errno)") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p in
                bind(fd, p, len) == 0 && getsockname(fd, p, &len) == 0
            }
        }
        guard ok else { throw LaunchError.didNotStart("bind: \(errno)") }
        return UInt16(bigEndian: addr.sin_port)
    }

    /// Starts Rootcanal and waits (up to `readyTimeout`) until its HCI port accepts
    /// connections, blocking the calling thread; from async code use `launch`.
    public convenience init(binary: String, logPath: String? = nil, readyTimeout: Duration = .seconds(15)) throws {
        try self.init(starting: binary, logPath: logPath)
        let deadline = ContinuousClock.now + readyTimeout
        while try !isReady(deadline: deadline, readyTimeout) { usleep(20_000) }
        let probe = try ResetProbe(port: hciPort, owner: self)
        while try !probe.answered(deadline: deadline, readyTimeout) { usleep(20_000) }
    }

    /// Starts Rootcanal and waits (up to `readyTimeout`) until its HCI port accepts
    /// connections, sleeping between checks instead of holding a thread.
    /// `firstHCIPort` makes the first attempt use that HCI port (the test of the race
    /// above takes a port first, then hands it here).
    public static func launch(binary: String, logPath: String? = nil, readyTimeout: Duration = .seconds(15),
                              firstHCIPort: UInt16? = nil) async throws -> RootcanalProcess {
        var attempt = 1
        while true {
            let rc = try RootcanalProcess(starting: binary, logPath: logPath, hciPort: attempt == 1 ? firstHCIPort : nil)
            let deadline = ContinuousClock.now + readyTimeout
            do {
                while try !rc.isReady(deadline: deadline, readyTimeout) { try await Task.sleep(for: .milliseconds(20)) }
                let probe = try ResetProbe(port: rc.hciPort, owner: rc)
                while try !probe.answered(deadline: deadline, readyTimeout) { try await Task.sleep(for: .milliseconds(20)) }
                return rc
            } catch LaunchError.portTaken where attempt < 5 {
                rc.stop()
                attempt += 1
            }
        }
    }

    private init(starting binary: String, logPath: String?, hciPort: UInt16? = nil) throws {
        var ports = try (0..<4).map { _ in try Self.freePort() }
        if let hciPort { ports[1] = hciPort }
        self.binary = binary
        self.hciPort = ports[1]
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["-test_port=\(ports[0])", "-hci_port=\(ports[1])", "-link_port=\(ports[2])", "-link_ble_port=\(ports[3])"]
        if let logPath, FileManager.default.createFile(atPath: logPath, contents: nil), let h = FileHandle(forWritingAtPath: logPath) {
            p.standardOutput = h
            p.standardError = h
        } else {
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
        }
        do { try p.run() } catch { throw LaunchError.didNotStart("\(error)") }
        self.process = p
    }

    /// An HCI Reset on a connection of its own to a Rootcanal that has just started
    /// listening, until its Command Complete comes. Rootcanal gives each connection a
    /// controller of its own, gone when it closes (the next ones get the same address),
    /// so the probe leaves nothing behind. Right after it starts, on a loaded machine,
    /// Rootcanal can take seconds to answer its first command: CI once saw a host's
    /// Reset time out after 5 s on a Rootcanal that had taken 5 s to listen. A
    /// Rootcanal handed to a test has answered one already.
    private final class ResetProbe {
        let fd: Int32
        let owner: RootcanalProcess
        var framer = H4Framer()

        init(port: UInt16, owner: RootcanalProcess) throws {
            guard let fd = connectToLoopback(port: port) else { throw LaunchError.didNotStart("HCI port \(port) refused the probe") }
            self.fd = fd
            self.owner = owner
            let reset = HCIPacket.command(opcode: .reset, parameters: []).h4Bytes
            let sent = reset.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent == reset.count else {
                close(fd)
                throw LaunchError.didNotStart("HCI port \(port): the probe's Reset not sent (errno \(errno))")
            }
        }

        deinit { close(fd) }

        /// Whether Reset's Command Complete has come (other packets before it are
        /// skipped); throws when the connection ends, Rootcanal dies or `deadline` passes.
        func answered(deadline: ContinuousClock.Instant, _ readyTimeout: Duration) throws -> Bool {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 0) > 0 {
                var buffer = [UInt8](repeating: 0, count: 512)
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0 else { throw LaunchError.didNotStart("HCI port \(owner.hciPort) closed the probe's connection") }
                framer.append(buffer[0..<n])
                do {
                    while let packet = try framer.nextPacket() {
                        if case let .commandComplete(c)? = try? HCIEvent(packet), c.commandOpcode == .reset { return true }
                    }
                } catch {
                    throw LaunchError.didNotStart("HCI port \(owner.hciPort) sent no H4: \(error)")
                }
            }
            guard owner.process.isRunning else { throw LaunchError.didNotStart("exited with status \(owner.process.terminationStatus)") }
            guard ContinuousClock.now < deadline else {
                owner.stop()
                throw LaunchError.didNotStart("no answer to HCI Reset on port \(owner.hciPort) within \(readyTimeout)")
            }
            return false
        }
    }

    /// Whether the HCI port accepts connections, on this Rootcanal's listener; throws
    /// when Rootcanal died, `deadline` passed, or another process holds the port.
    private func isReady(deadline: ContinuousClock.Instant, _ readyTimeout: Duration) throws -> Bool {
        if Self.accepts(port: hciPort) {
            guard let owner = Self.listenerInode(port: hciPort) else { return true }  // no /proc: trust it
            if Self.holds(pid: process.processIdentifier, socket: owner) { return true }
            throw LaunchError.portTaken(hciPort)
        }
        guard process.isRunning else { throw LaunchError.didNotStart("exited with status \(process.terminationStatus)") }
        // Not listening yet, and another process's socket has the port (a connection's
        // local end): Rootcanal's bind failed, and it never will listen. A socket no
        // process holds (inode 0: one closing, TIME_WAIT) may not stop a bind, so it
        // counts only once Rootcanal has had 2 s to listen.
        let settled = ContinuousClock.now - started > .seconds(2)
        if Self.sockets(port: hciPort).contains(where: { $0.inode == "0" ? settled : !Self.holds(pid: process.processIdentifier, socket: $0.inode) }) {
            throw LaunchError.portTaken(hciPort)
        }
        guard ContinuousClock.now < deadline else {
            stop()
            throw LaunchError.didNotStart("HCI port \(hciPort) not open after \(readyTimeout)")
        }
        return false
    }

    /// The inode of the socket listening on loopback or any address at `port`, from
    /// /proc/net/tcp and tcp6; nil when there is none or no /proc.
    static func listenerInode(port: UInt16) -> String? {
        sockets(port: port).first { $0.listening }?.inode
    }

    /// Every TCP socket whose local port is `port` (any address, any state), from
    /// /proc/net/tcp and tcp6: its inode ("0" for one no process holds any more) and
    /// whether it listens. Empty when there is none or no /proc.
    static func sockets(port: UInt16) -> [(inode: String, listening: Bool)] {
        var found: [(inode: String, listening: Bool)] = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = readWhole(table) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
                let f = line.split(separator: " ", omittingEmptySubsequences: true)
                guard f.count > 9, let colon = f[1].lastIndex(of: ":"),
                      UInt16(f[1][f[1].index(after: colon)...], radix: 16) == port else { continue }
                found.append((String(f[9]), f[3] == "0A"))
            }
        }
        return found
    }

    /// A /proc file to its end. Such a file has no size, and one read(2) returns a page
    /// at most: with many sockets open, /proc/net/tcp is longer than that.
    static func readWhole(_ path: String) -> String? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += chunk[..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether process `pid` holds the socket with inode `socket` (one of its /proc/PID/fd links).
    static func holds(pid: Int32, socket inode: String) -> Bool {
        let dir = "/proc/\(pid)/fd"
        guard let fds = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return false }
        return fds.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(dir)/\($0)")) == "socket:[\(inode)]" }
    }

    static func accepts(port: UInt16) -> Bool {
        guard let fd = connectToLoopback(port: port) else { return false }
        close(fd)
        return true
    }

    /// Transport spec for a new controller on this Rootcanal (each TCP client gets its own).
    public var transportSpec: String { "tcp:127.0.0.1:\(hciPort)" }

    /// Kills a child process for good (see `stop()` for why not SIGTERM).
    public static func kill(_ p: Process) {
        guard p.isRunning else { return }
        Glibc.kill(p.processIdentifier, SIGKILL)
    }

    public func stop() {
        lock.lock()
        defer { lock.unlock() }
        guard process.isRunning else { return }
        // SIGKILL, not SIGTERM: a child started from a Swift process's worker thread
        // inherits that thread's signal mask, in which SIGTERM is blocked, so SIGTERM is
        // never delivered (found as leftover Rootcanals). Rootcanal keeps nothing to flush.
        // Poll rather than waitUntilExit(), which can block forever inside Swift concurrency.
        let pid = process.processIdentifier
        Glibc.kill(pid, SIGKILL)
        for _ in 0..<400 {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid || !process.isRunning { return }
            usleep(10_000)
        }
    }

    deinit { stop() }
}
