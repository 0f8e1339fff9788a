// btctl monitor: a live decoded view of HCI traffic, like btmon. Two sources:
//
// - the kernel's HCI monitor channel (the default, where the kernel has Bluetooth):
//   every adapter's traffic as the kernel stack sees it, read-only;
// - a tap (`--listen [HOST:]PORT`): btctl listens where a host (Bumble, a daemon,
//   another btctl) connects as it would to Rootcanal's HCI port, forwards every packet
//   both ways between it and the controller at `-t`, and decodes each as it passes.
//
// Frames print as `trace show` prints them (same decoder, same JSON, schema
// docs/schemas/trace-show.schema.json); --btsnoop/--pcap record them.

import ArgumentParser
import Foundation
import HCI
import Snoop
import Synchronization
import Transports

struct Monitor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show HCI traffic live, decoded: the kernel's monitor channel, or a tap between a host and a controller.",
        discussion: """
            Without --listen, reads the kernel's HCI monitor channel (like btmon; needs \
            CAP_NET_RAW and a kernel with Bluetooth). With --listen, waits for a host to \
            connect to that TCP port (H4, as to Rootcanal's HCI port), forwards its packets \
            to the controller at -t and the controller's back, and shows each: e.g. \
            `btctl monitor --listen 127.0.0.1:7000 -t tcp:127.0.0.1:6402` and point Bumble at \
            tcp-client:127.0.0.1:7000. Frames print as `trace show` prints them; with --json \
            one object per frame (docs/schemas/trace-show.schema.json). Status lines go to \
            stderr. Ends on SIGINT/SIGTERM, --duration, or when either side of a tap closes.
            """)

    enum PacketKind: String, ExpressibleByArgument, CaseIterable {
        case command, event, acl, sco, iso, monitor
    }

    @OptionGroup var options: ControllerOptions

    @Option(help: ArgumentHelp("Be a tap: listen on this TCP port (HOST defaults to 127.0.0.1) for a host and forward it to the controller at -t.", valueName: "[HOST:]PORT"))
    var listen: String?

    @Option(parsing: .upToNextOption, help: ArgumentHelp("Show only these packet types (command, event, acl, sco, iso, monitor); recording keeps everything.", valueName: "TYPE"))
    var type: [PacketKind] = []

    @Option(help: ArgumentHelp("Show only data packets (ACL, SCO, ISO) of this connection handle, 0 to 0x0EFF; commands and events still show unless --type leaves them out.", valueName: "HANDLE"))
    var handle: String?

    @Option(help: ArgumentHelp("Kernel monitor: show only this adapter (N of hciN).", valueName: "N"))
    var index: UInt16?

    @Flag(help: "One line per frame, without the decoded fields.")
    var brief = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this many seconds, 0.1 to 86400 (default: until interrupted).", valueName: "SECONDS"))
    var duration: Double?

    func validate() throws {
        if let d = duration, !(d.isFinite && (0.1...86_400).contains(d)) { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(d)") }
        if let handle { _ = try Self.parseHandle(handle) }
        if let listen { _ = try Self.parseListen(listen) }
        if listen == nil, options.transport != nil { throw ValidationError("-t names the controller a tap forwards to; give --listen too (without it, monitor reads the kernel's monitor channel)") }
        if listen != nil, index != nil { throw ValidationError("--index selects an adapter on the kernel's monitor channel; a tap has one controller") }
    }

    static func parseHandle(_ s: String) throws -> UInt16 {
        guard let v = cliUInt16(s), v <= ACLDataPacket.maximumConnectionHandle else { throw ValidationError("--handle must be a connection handle from 0 to 0x0EFF, not '\(s)'") }
        return v
    }

    static func parseListen(_ s: String) throws -> (host: String, port: UInt16) {
        let parts = s.split(separator: ":", omittingEmptySubsequences: false)
        let host = parts.count > 1 ? parts.dropLast().joined(separator: ":").trimmingCharacters(in: CharacterSet(charactersIn: "[]")) : "127.0.0.1"
        guard let last = parts.last, let port = UInt16(last), !host.isEmpty else {
            throw ValidationError("--listen takes [HOST:]PORT with PORT from 0 to 65535 (0 picks a free one), not '\(s)'")
        }
        return (host, port)
    }

    /// Decodes, filters and prints frames; counts what it showed.
    final class Printer: Sendable {
        private struct State {
            var decoder: FrameDecoder
            var number = 0
            var shown = 0
            var first: Int64?
            /// Standard output went away (the reader quit): nothing more is printed.
            var outputClosed = false
            /// Where hidden frames are decoded and dropped.
            let scratch = OutputBuffer(capacity: 1024)
        }
        private let state: Mutex<State>
        private let json: Bool, brief: Bool, quiet: Bool
        private let types: Set<String>
        private let handle: UInt16?
        private let index: UInt16?
        private let writer: TraceFileWriter?

        init(json: Bool, brief: Bool, quiet: Bool, types: [PacketKind], handle: UInt16?, index: UInt16?, writer: TraceFileWriter?) {
            state = Mutex(State(decoder: FrameDecoder()))
            (self.json, self.brief, self.quiet, self.handle, self.index, self.writer) = (json, brief, quiet, handle, index, writer)
            self.types = Set(types.map(\.rawValue))
        }

        var counts: (frames: Int, shown: Int) { state.withLock { ($0.number, $0.shown) } }

        func shows(_ r: TraceRecord) -> Bool {
            if let index, r.adapterIndex != index { return false }
            let kind: String
            switch r.content {
            case .monitor: kind = "monitor"
            default: kind = r.hciBytes?.type.description ?? "unknown"
            }
            if !types.isEmpty, !types.contains(kind) { return false }
            if let handle, let (type, body) = r.hciBytes, [.acl, .sco, .iso].contains(type) {
                guard body.count >= 2, (UInt16(body[0]) | UInt16(body[1]) << 8) & 0x0FFF == handle else { return false }
            }
            return true
        }

        /// Records the frame, and prints it when the filters let it through. Under the
        /// lock: the two directions of a tap number, record and print in one order.
        /// Returns false once standard output has closed (`btctl monitor | head`): the
        /// monitor then ends as it does on a signal.
        @discardableResult
        func take(_ r: TraceRecord) -> Bool {
            state.withLock { s in
                // The recording closed (a signal is ending the monitor, its transports not
                // yet): a frame that cannot be recorded is not shown either, so what was
                // shown and what was recorded stay the same frames.
                if let writer, !writer.write(r) { return true }
                s.number += 1
                if s.first == nil { s.first = r.timestampMicros }
                guard !quiet, !s.outputClosed else { return !s.outputClosed }
                guard shows(r) else {
                    // A hidden frame still teaches the decoder (a channel opened in it).
                    s.decoder.write(r, number: s.number, firstTimestamp: s.first ?? r.timestampMicros, style: .brief, into: s.scratch)
                    s.scratch.removeAll()
                    return true
                }
                s.shown += 1
                let out = OutputBuffer(capacity: 1024)
                s.decoder.write(r, number: s.number, firstTimestamp: s.first ?? r.timestampMicros,
                                style: json ? .json : brief ? .brief : .text, into: out)
                do { try out.withBytes(StandardOutput.write) } catch { s.outputClosed = true }
                return !s.outputClosed
            }
        }
    }

    func run() async throws {
        let handleFilter = try handle.map(Self.parseHandle)
        // With --pcap -, stdout carries the capture: frames are not printed.
        let quiet = options.pcap == "-"
        if let listen {
            let (host, port) = try Self.parseListen(listen)
            try await tap(host: host, port: port, printer: Printer(json: options.json, brief: brief, quiet: quiet, types: type, handle: handleFilter, index: nil,
                                                                   writer: try options.openRecording()))
        } else {
            try await kernel(printer: Printer(json: options.json, brief: brief, quiet: quiet, types: type, handle: handleFilter, index: index,
                                              writer: try options.openRecording(monitor: true)))
        }
    }

    /// Why a monitor ends when its reader quits (not an error: exit status 0).
    static let outputClosed = "standard output closed"

    func summary(_ printer: Printer, _ what: String) {
        let (frames, shown) = printer.counts
        note("\(what): \(frames) frame\(frames == 1 ? "" : "s")\(shown == frames ? "" : ", \(shown) shown")")
    }

    /// Waits for `--duration`, a signal, or `ended` (whichever first).
    func wait(until ended: @escaping @Sendable () async -> Void) async {
        await withTaskGroup(of: Void.self) { g in
            g.addTask { await ended() }
            g.addTask {
                if let duration { await Interrupt.sleep(for: cliDuration(seconds: duration)) } else { await Interrupt.waitForSignal() }
            }
            await g.next()
            g.cancelAll()
        }
    }

    func tap(host: String, port: UInt16, printer: Printer) async throws {
        let controller = try await options.openBaseTransport()
        let listener: H4Listener
        do { listener = try H4Listener(host: host, port: port) } catch {
            await controller.close()
            throw CLIError("cannot listen on \(host):\(port): \(error)")
        }
        Interrupt.onSignal { listener.close() }
        note("listening on tcp:\(host):\(listener.port) for a host; forwarding to \(options.transportName)")
        let logger = options.logger
        let hostSide: ChannelTransport
        do { hostSide = try await listener.accept(logger: logger) } catch {
            listener.close()
            await controller.close()
            if Interrupt.requested { return }
            throw CLIError("\(error)")
        }
        listener.close()
        note("host connected")
        let ended = FirstReason()
        let (sideEnded, sideEndedSignal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let now = RecordingTransport.wallClockMicros
        // One task per direction; `send` waits, so a slow side slows the other (nothing dropped).
        func forward(_ from: any HCITransport, to: any HCITransport, _ direction: TraceRecord.Direction,
                     _ fromName: String, _ toName: String) -> Task<Void, Never> {
            Task {
                defer { sideEndedSignal.yield() }
                do {
                    for try await p in from.inbound {
                        guard printer.take(TraceRecord(timestampMicros: now(), packet: p, direction: direction)) else {
                            return ended.set(Self.outputClosed)
                        }
                        do { try await to.send(p) } catch {
                            return ended.set("\(toName): \(error)")
                        }
                    }
                    ended.set("\(fromName) closed the connection")
                } catch TransportError.endOfStream {
                    ended.set("\(fromName) closed the connection")
                } catch {
                    ended.set("\(fromName): \(error)")
                }
            }
        }
        let up = forward(hostSide, to: controller, .hostToController, "the host", "the controller")
        let down = forward(controller, to: hostSide, .controllerToHost, "the controller", "the host")
        await wait { for await _ in sideEnded { break } }  // either side ending ends the tap
        ended.set("stopped")  // unless a side ended first
        // Either side ending ends the tap: close both, then the loops finish.
        await hostSide.close()
        await controller.close()
        up.cancel(); down.cancel()
        _ = await (up.value, down.value)
        summary(printer, ended.reason ?? "stopped")
    }

    func kernel(printer: Printer) async throws {
        let monitor: KernelMonitor
        do { monitor = try KernelMonitor() } catch { throw CLIError("cannot open the kernel's HCI monitor channel: \(error)") }
        Interrupt.onSignal { monitor.close() }
        note("reading the kernel's HCI monitor channel")
        let failure = FirstReason()
        let reader: Task<Void, Never> = Task {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                // recv blocks: a thread of its own, not the cooperative pool.
                Thread.detachNewThread {
                    do {
                        try monitor.read(timestampMicros: RecordingTransport.wallClockMicros) {
                            if !printer.take($0) {
                                failure.set(Self.outputClosed)
                                monitor.close()
                            }
                        }
                    } catch {
                        failure.set("\(error)")
                    }
                    c.resume()
                }
            }
        }
        await wait { await reader.value }
        monitor.close()
        await reader.value
        summary(printer, failure.reason ?? "stopped")
        if let f = failure.reason, f != Self.outputClosed { throw CLIError(f) }
    }
}

/// Why something ended: the first reason given wins.
final class FirstReason: Sendable {
    private let value = Mutex<String?>(nil)
    func set(_ reason: String) { value.withLock { $0 = $0 ?? reason } }
    var reason: String? { value.withLock { $0 } }
}
