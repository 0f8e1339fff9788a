// Live tests against Rootcanal (a controller nobody here wrote) and tshark (a decoder
// nobody here wrote). Scripts/test.sh installs both and sets BLE_REQUIRE_INTEROP=1,
// which turns "not installed" into a failure instead of a skip.

import BLETesting
import Foundation
import Synchronization
import HCI
import Logging
import NIOCore
import NIOPosix
import Snoop
import Testing
import Transports

extension Trait where Self == TimeLimitTrait {
    /// Every test here (their longest take ~40 s in a full run): one that waits on a
    /// process or a peer for longer is recorded as a failure under its own name, and
    /// ends if what it waits on can be cancelled; Scripts/run-tests.sh reports and
    /// kills a run that still has not ended.
    static var liveTimeLimit: Self { .timeLimit(.minutes(3)) }
}

enum Interop {
    static let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
    static let required = ProcessInfo.processInfo.environment["BLE_REQUIRE_INTEROP"] == "1"
    /// `XDG_STATE_HOME` for every program this test run starts (set in its own
    /// environment, which they inherit, before the first btctl starts): a fresh
    /// directory under the temporary one, where btctl's default bond files go.
    static let stateHome: String = {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("swift-ble-tests-\(getpid())/state").path
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        setenv("XDG_STATE_HOME", dir, 1)
        return dir
    }()
    static let logger = Logger(label: "interop") { _ in SwiftLogNoOpLogHandler() }

    static func rootcanal() throws -> String? {
        do { return try RootcanalProcess.locate(packageRoot: root) } catch {
            if required { throw error }
            return nil
        }
    }

    static func tshark() throws -> String? {
        for p in ["/usr/bin/tshark", "/usr/local/bin/tshark"] where FileManager.default.isExecutableFile(atPath: p) { return p }
        if required { throw RootcanalProcess.LaunchError.didNotStart("tshark not installed (apt-get install tshark)") }
        return nil
    }

    /// Runs blocking work (a pipe read to its end, a wait for a child's exit) on its own
    /// thread: on this 2-core machine the cooperative pool has two threads, and two tests
    /// blocking them stalled every other test's tasks for seconds (a 5 s HCI Reset
    /// timeout in the replay test when the whole suite ran).
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { c in Thread.detachNewThread { c.resume(returning: body()) } }
    }

    /// Everything a child wrote to `pipe` until it closed it, read off the pool; what
    /// came within `limit` seconds if it never closes (a child another test spawned can
    /// hold the pipe's write end: see `exit(of:)`), so the caller's checks fail instead
    /// of waiting for ever.
    static func readAll(_ pipe: Pipe, limit: TimeInterval = 120) async -> Data {
        let fd = pipe.fileHandleForReading.fileDescriptor
        return await offPool {
            let deadline = Date().addingTimeInterval(limit)
            var data = Data()
            var chunk = [UInt8](repeating: 0, count: 65536)
            while Date() < deadline {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&p, 1, 100)
                if ready < 0, errno == EINTR { continue }
                guard ready > 0 else { continue }
                let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR || errno == EAGAIN { continue }
                guard n > 0 else { break }  // end of file (or an error: the end either way)
                data.append(contentsOf: chunk[..<n])
            }
            return data
        }
    }

    /// Waits off the pool for `process` to exit; SIGKILLs it (once) after `timeout`
    /// seconds. -1 when Foundation still has it running `unnoticedExit` after that:
    /// Foundation learns of an exit when the child's end of a socket pair closes, and a
    /// child another test spawns at that moment can inherit that end (Foundation's spawn
    /// closes descriptors up to the highest one open when it began, not one opened on
    /// another thread meanwhile), so the exit shows only when that child ends. The wait then ends, and the caller's check fails.
    static func exit(of process: Process, timeout: TimeInterval = 60) async -> Int32 {
        let pid = process.processIdentifier
        return await offPool {
            let deadline = Date().addingTimeInterval(timeout)
            var killed: Date?
            while process.isRunning {
                if let killed {
                    if Date().timeIntervalSince(killed) > unnoticedExit { return -1 }
                } else if Date() >= deadline {
                    // Once: after the exit the PID can go to another process.
                    kill(pid, SIGKILL)
                    killed = Date()
                }
                usleep(10_000)
            }
            return process.terminationStatus
        }
    }

    /// How long after a SIGKILL a wait still waits for Foundation to notice the exit.
    static let unnoticedExit: TimeInterval = 10

    /// Starts the Bumble peer `script` (in Tests/InteropTests) on Rootcanal's HCI `port`
    /// with `args`; its JSON lines come on the pipe, its log on our stderr with
    /// BLE_SHOW_BUMBLE=1. The caller stops it (`RootcanalProcess.kill`).
    static func launchBumble(_ python: String, _ script: String, port: UInt16, _ args: [String]) throws -> (Process, Pipe) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = [root + "/Tests/InteropTests/" + script, String(port)] + args
        let out = Pipe()
        p.standardOutput = out
        p.standardError = ProcessInfo.processInfo.environment["BLE_SHOW_BUMBLE"] == "1" ? FileHandle.standardError : FileHandle.nullDevice
        try p.run()
        return (p, out)
    }

    /// Runs a program to completion (killed with SIGKILL after `timeout`), returning its
    /// status and stdout (with stderr too when `mergeStderr`). Never blocks a cooperative thread:
    /// the output is read on its own thread, and the output, its end, the exit and the
    /// timeout each reach the caller as an event, so tests that serve a peer in-process
    /// keep running while the peer's program does. `interrupt`: sends that signal once
    /// the output contains the text (a person's Ctrl-C once the command is under way).
    static func execute(_ path: String, _ args: [String], timeout: TimeInterval = 60, mergeStderr: Bool = false,
                        interrupt: (signal: Int32, whenOutputContains: String)? = nil) async throws -> (status: Int32, out: String) {
        enum Happening { case output, outputEnded, exited, timedOut, unnoticed }
        // A handful of events per run: nothing is dropped.
        let (happenings, happened) = AsyncStream.makeStream(of: Happening.self, bufferingPolicy: .unbounded)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        p.standardError = mergeStderr ? out : FileHandle.nullDevice
        p.terminationHandler = { _ in happened.yield(.exited) }
        try p.run()
        let collected = Mutex(Data())
        let reader = out.fileHandleForReading
        Thread.detachNewThread {
            while true {
                let d = reader.availableData
                if d.isEmpty { break }
                collected.withLock { $0.append(d) }
                happened.yield(.output)
            }
            happened.yield(.outputEnded)
        }
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let timer = loop.scheduleTask(in: .milliseconds(Int64(timeout * 1000))) { happened.yield(.timedOut) }
        var unnoticed: Scheduled<Void>?
        var exited = false, outputEnded = false, interrupted = false
        waiting: for await h in happenings {
            switch h {
            case .output:
                if let (sig, marker) = interrupt, !interrupted, collected.withLock({ String(decoding: $0, as: UTF8.self).contains(marker) }) {
                    kill(p.processIdentifier, sig)
                    interrupted = true
                }
            case .outputEnded: outputEnded = true
            case .exited: exited = true
            // SIGKILL: a child of the test process may have SIGTERM ignored (the
            // disposition is inherited through exec), and then terminate() did nothing.
            case .timedOut:
                if !exited { kill(p.processIdentifier, SIGKILL) }
                unnoticed = loop.scheduleTask(in: .milliseconds(Int64(unnoticedExit * 1000))) { happened.yield(.unnoticed) }
            // Killed (or exited), and its exit or the end of its output still unseen: a
            // child another test spawned holds its pipe or Foundation's exit socket (see
            // `exit(of:)`).
            case .unnoticed: break waiting
            }
            if exited && outputEnded { break }
        }
        timer.cancel()
        unnoticed?.cancel()
        return (exited ? p.terminationStatus : -1, String(decoding: collected.withLock { $0 }, as: UTF8.self))
    }

    static func run(_ path: String, _ args: [String]) async throws -> String { try await execute(path, args).out }
}

@Suite(.serialized, .liveTimeLimit) struct RootcanalTests {
    /// A socket listening on 127.0.0.1, on a port the system picked.
    static func listener() throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard fd >= 0, bound, listen(fd, 4) == 0 else { close(fd); throw RootcanalProcess.LaunchError.didNotStart("listener: \(errno)") }
        return (fd, try localPort(fd))
    }

    /// The local port of socket `fd`.
    static func localPort(_ fd: Int32) throws -> UInt16 {
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) == 0 } }
        guard ok else { throw RootcanalProcess.LaunchError.didNotStart("getsockname: \(errno)") }
        return UInt16(bigEndian: addr.sin_port)
    }

    /// The free port found for Rootcanal's HCI listener can be taken before Rootcanal
    /// binds it; Rootcanal then runs on without it, and the port accepts for someone
    /// else. Here a listener of ours takes the port first: the launch must not take our
    /// listener for Rootcanal's, and starts again on another port, where a controller
    /// answers.
    ///
    /// 120 more listeners of ours make /proc/net/tcp longer than the one page a single
    /// read(2) of it returns, as a full test run does: the check must read it to its end.
    /// (In one full run, before the check read it with read(2) to the end, the taken
    /// port was trusted.)
    @Test func aTakenHCIPortIsNotTakenForRootcanals() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        let others = try (0..<120).map { _ in try Self.listener().fd }
        defer { for fd in others { close(fd) } }
        let (fd, taken) = try Self.listener()
        defer { close(fd) }
        let rc = try await RootcanalProcess.launch(binary: binary, firstHCIPort: taken)
        defer { rc.stop() }
        #expect(rc.hciPort != taken)
        let controller = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger), logger: Interop.logger)
        _ = try await controller.initialize()
        await controller.close()
    }

    /// The other way a free port goes: a connection's local end takes it (any TCP
    /// client gets one). Rootcanal's bind then fails and the port never accepts; the
    /// launch sees the other process's socket on it and starts again at once, instead
    /// of waiting out its 15 s.
    @Test func aPortAConnectionTookIsLeftForAnother() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        let (server, port) = try Self.listener()
        defer { close(server) }
        let client = try #require(connectToLoopback(port: port))
        defer { close(client) }
        let taken = try Self.localPort(client)  // the connection's local end
        let started = ContinuousClock.now
        let rc = try await RootcanalProcess.launch(binary: binary, firstHCIPort: taken)
        defer { rc.stop() }
        #expect(rc.hciPort != taken)
        #expect(ContinuousClock.now - started < .seconds(10))
        let controller = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger), logger: Interop.logger)
        _ = try await controller.initialize()
        await controller.close()
    }

    /// Starts Rootcanal, opens two controllers, makes one advertise and the other scan,
    /// and checks the report. The session is recorded; tshark must read it cleanly.
    @Test func advertiserIsSeenByScanner() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ble-interop-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let traceA = dir + "/advertiser.btsnoop", traceB = dir + "/scanner.btsnoop"
        let wa = try TraceFileWriter(path: traceA), wb = try TraceFileWriter(path: traceB)
        let a = HCIController(transport: RecordingTransport(wrapping: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger), writer: wa), logger: Interop.logger)
        let b = HCIController(transport: RecordingTransport(wrapping: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger), writer: wb), logger: Interop.logger)
        let infoA = try await a.initialize()
        let infoB = try await b.initialize()
        #expect(infoA.address != infoB.address)

        let name = Array("swift-ble".utf8)
        let adv = ADStructure.encode([ADStructure(type: 0x01, data: [0x06]), ADStructure(type: 0x09, data: name),
                                      ADStructure(type: 0xFF, data: [0xE0, 0x00, 0x01, 0x02])])
        try await a.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20))
        try await a.send(LESetAdvertisingData(data: adv))
        try await a.send(LESetAdvertisingEnable(advertisingEnable: true))

        let events = await b.events()
        try await b.send(LESetScanParameters(scanType: 0))
        try await b.send(LESetScanEnable(scanEnable: true, filterDuplicates: false))
        let found = await withTaskGroup(of: LEAdvertisingReport.Report?.self) { group in
            group.addTask {
                for await e in events {
                    if case let .le(.advertisingReport(r)) = e, let rp = r.reports.first(where: { $0.address == infoA.address }) { return rp }
                }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        try await b.send(LESetScanEnable(scanEnable: false))
        try await a.send(LESetAdvertisingEnable(advertisingEnable: false))
        await a.close()
        await b.close()
        wa.close()
        wb.close()

        let report = try #require(found, "no advertising report from \(infoA.address) within 10 s")
        #expect(report.addressType == .public)
        #expect(report.eventType == 0)  // ADV_IND
        #expect(report.rssi < 20)
        let ads = ADStructure.parse(report.data)
        #expect(ads.damage == nil)
        #expect(ads.structures.map(\.type) == [0x01, 0x09, 0xFF])
        #expect(ads.structures[1].data == name)

        // Our recording reads back, and tshark finds no malformed frame in it.
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: traceB))))
        #expect(trace.damage == nil)
        #expect(trace.records.contains { r in
            if case let .packet(.event(.leMeta, p)) = r.content { return p.first == 0x02 }
            return false
        })
        if let tshark = try Interop.tshark() {
            for f in [traceA, traceB] {
                let malformed = try await Interop.run(tshark, ["-r", f, "-Y", "_ws.malformed || _ws.expert.severity >= 8388608"])
                #expect(malformed.isEmpty, "tshark flags frames in \(f): \(malformed)")
                let count = try await Interop.run(tshark, ["-r", f, "-T", "fields", "-e", "frame.number"])
                let records = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: f)))).records.count
                #expect(count.split(separator: "\n").count == records)
            }
        }
        if let keep = ProcessInfo.processInfo.environment["BLE_RECORD_FIXTURES"] {
            try? FileManager.default.removeItem(atPath: keep + "/rootcanal-scan.btsnoop")
            try FileManager.default.copyItem(atPath: traceB, toPath: keep + "/rootcanal-scan.btsnoop")
            // rootcanal-init: the advertiser's initialisation, up to its first advertising command.
            let advertiser = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: traceA)))).records
            let end = advertiser.firstIndex { if case .packet(.command(.leSetAdvertisingParameters, _)) = $0.content { return true }; return false } ?? advertiser.count
            let e = TraceEncoder(.btsnoop(datalink: 1002))
            try Data(e.header + advertiser[..<end].compactMap { e.record($0) }.flatMap { $0 }).write(to: URL(fileURLWithPath: keep + "/rootcanal-init.btsnoop"))
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Every format we write, rewritten from a capture we recorded: tshark reads each
    /// with zero malformed frames and the same number of frames.
    @Test(arguments: [
        TraceEncoder.Output.btsnoop(datalink: 1001), .btsnoop(datalink: 1002), .btsnoop(datalink: 2001),
        .pcap(linkType: 187), .pcap(linkType: 201), .pcap(linkType: 254), .pcapng(linkType: 201), .pcapng(linkType: 254),
    ])
    func tsharkReadsEveryFormatWeWrite(output: TraceEncoder.Output) async throws {
        guard let tshark = try Interop.tshark() else { return }
        let source = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: Interop.root + "/Fixtures/rootcanal-scan.btsnoop"))))
        let e = TraceEncoder(output)
        let bytes = e.header + source.records.compactMap { e.record($0) }.flatMap { $0 }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("fmt-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let malformed = try await Interop.run(tshark, ["-r", path, "-Y", "_ws.malformed || _ws.expert.severity >= 8388608"])
        #expect(malformed.isEmpty, "\(output): \(malformed)")
        let count = try await Interop.run(tshark, ["-r", path, "-T", "fields", "-e", "frame.number"]).split(separator: "\n").count
        #expect(count == source.records.count, "\(output)")
        let back = try TraceReader.read(bytes)
        #expect(back.records.map(\.packet) == source.records.map(\.packet))
    }

    /// `trace show --json`'s decode of a capture we recorded, frame by frame against tshark's.
    @Test(arguments: ["rootcanal-init.btsnoop", "rootcanal-scan.btsnoop"])
    func traceShowAgreesWithTshark(fixture: String) async throws {
        guard let tshark = try Interop.tshark() else { return }
        let path = Interop.root + "/Fixtures/" + fixture
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
        var decoder = FrameDecoder()
        let ours = trace.records.enumerated().map { decoder.decode($1, number: $0 + 1, firstTimestamp: 0).json }
        let fields = ["frame.number", "hci_h4.direction", "hci_h4.type", "bthci_cmd.opcode", "bthci_evt.code",
                      "bthci_evt.le_meta_subevent", "bthci_acl.chandle", "bthci_evt.bd_addr", "bthci_evt.rssi"]
        let out = try await Interop.run(tshark, ["-r", path, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"] + fields.flatMap { ["-e", $0] })
        let rows = out.split(separator: "\n").map { $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init) }
        #expect(rows.count == ours.count)
        #expect(rows.allSatisfy { $0.count == fields.count }, "tshark rows are incomplete: the comparison would be vacuous")
        func num(_ s: String) -> Int? { s.hasPrefix("0x") ? Int(s.dropFirst(2), radix: 16) : Int(s) }
        for (row, j) in zip(rows, ours) where row.count == fields.count {
            let frame = j["frame"]
            #expect(num(row[0]).map { JSONValue.int($0) } == frame)
            // tshark: direction 0x00 sent (host to controller), 0x01 received.
            #expect((row[1] == "0x00" || row[1] == "0x00000000" ? "tx" : "rx") == { if case let .string(s)? = j["dir"] { return s }; return "" }(), "frame \(row[0])")
            switch num(row[2]) {
            case 1?: #expect(j["opcode"] == num(row[3]).map(JSONValue.int), "frame \(row[0])")
            case 4?:
                #expect(j["event"] == num(row[4]).map(JSONValue.int), "frame \(row[0])")
                if let sub = num(row[5]) { #expect(j["subevent"] == .int(sub), "frame \(row[0])") }
                if let rssi = Int(row[8]), case let .array(reports)? = j["reports"], let first = reports.first {
                    #expect(first["rssi"] == .int(rssi), "frame \(row[0])")
                    #expect(first["address"] == .string(row[7].uppercased()), "frame \(row[0])")
                }
            case 2?: #expect(j["handle"] == num(row[6]).map(JSONValue.int), "frame \(row[0])")
            default: Issue.record("frame \(row[0]): unexpected type \(row[2])")
            }
        }
    }
}
