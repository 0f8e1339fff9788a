// btctl trace replay FILE: play a recording's controller to a host that connects over
// H4 (as to Rootcanal's HCI port), and check that the host sends what the recorded
// host sent (Snoop's ReplayTransport). A recorded `btctl gatt read` replays against
// `btctl gatt read -t tcp:127.0.0.1:PORT` offline, byte for byte; the first packet
// that differs ends the replay with both packets decoded, and exit status 1.

import ArgumentParser
import Foundation
import HCI
import Logging
import Snoop
import Transports

extension Trace {
    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Play a trace's controller to a host over H4 and check that the host sends what was recorded.",
            discussion: """
            Listens on --listen for one host (H4 over TCP, as Rootcanal's HCI port). The \
            recording's controller packets go to the host in recorded order, each once every \
            host packet recorded before it has come; the host's packets are checked against \
            the recording as they come. Ends when the host has sent every recorded packet and \
            then closes the connection or stays silent for --timeout (exit 0), or at the first \
            difference: a packet the recording does not have there, the host closing early, or \
            the host silent for --timeout while the recording expects a packet of its (exit 1, \
            with the frame number and both packets decoded). By default the host may interleave \
            the commands and each link's data differently from the recording, never ahead of a \
            controller packet the recorded host had received first; --strict-order checks one \
            order. Example: `btctl trace replay Fixtures/rootcanal-gatt-read.btsnoop --listen 7000` \
            and `btctl gatt read --name btctl-battery --uuid 2A19 -t tcp:127.0.0.1:7000`.
            """)

        @Argument(help: "The recording (btsnoop, pcap or pcapng), made on the host's side of the controller (btctl --btsnoop, btmon, a tap).")
        var file: String
        @Option(help: ArgumentHelp("Listen on this TCP port for the host (HOST defaults to 127.0.0.1; 0 picks a free port, printed).", valueName: "[HOST:]PORT"))
        var listen = "127.0.0.1:0"
        @Option(help: ArgumentHelp("In a Linux monitor trace (btmon's, btctl monitor's) that holds several controllers, the one to replay.", valueName: "N"))
        var index: UInt16?
        @Flag(help: "Check every host packet in the recorded order, across commands and links' data.")
        var strictOrder = false
        @Flag(help: "The advertising commands may go ahead of links' data (a peripheral resuming its advertising when a central connects).")
        var advertisingIndependent = false
        @Option(name: .customLong("ignore"), parsing: .singleValue, help: ArgumentHelp(
            "A command the host may send or not, unchecked (LE Rand, LE Encrypt, ...): it gets the recorded answer to the next such command, else a bare success. By name or 0x hex; repeatable.",
            valueName: "COMMAND"), transform: { s in
                guard let o = HCIOpcode(parsing: s) else { throw ValidationError("--ignore takes a command's name (\"LE Rand\") or opcode (0x2018), not '\(s)'") }
                return o
            })
        var ignored: [HCIOpcode] = []
        @Option(help: ArgumentHelp("How long the host may stay silent while the recording expects a packet from it, 0.1 to 3600 (default 5).", valueName: "SECONDS"))
        var timeout: Double = 5
        @Flag(help: "One JSON object per line on stdout: listening, connected, then matched or mismatch.")
        var json = false

        func validate() throws {
            _ = try Monitor.parseListen(listen)
            if !(timeout.isFinite && (0.1...3600).contains(timeout)) { throw ValidationError("--timeout must be between 0.1 and 3600 seconds, not \(timeout)") }
        }

        func run() async throws {
            let (host, port) = try Monitor.parseListen(listen)
            var trace: Snoop.Trace
            do { trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: file)))) } catch { throw CLIError("\(file): \(error)") }
            if let damage = trace.damage { throw CLIError("\(file): \(trace.records.count) frames, then the file is \(damage); a replay needs the whole recording") }
            // One controller's conversation: a monitor trace may hold several.
            let indexes = Set(trace.records.compactMap { $0.packet == nil ? nil : $0.adapterIndex })
            if let index {
                guard indexes.contains(index) else {
                    throw CLIError("\(file): no packet of controller \(index)\(indexes.isEmpty ? " (the trace names no controllers)" : "; it has \(indexes.sorted().map(String.init).joined(separator: ", "))")")
                }
                // Frame numbers stay the file's: the records of other controllers are
                // blanked, not removed.
                trace.records = trace.records.map { r in
                    r.adapterIndex == index ? r : TraceRecord(timestampMicros: r.timestampMicros, direction: .unknown, content: .monitor(opcode: 0xFFFF, data: []))
                }
            } else if indexes.count > 1 {
                throw CLIError("\(file) holds the packets of controllers \(indexes.sorted().map(String.init).joined(separator: ", ")): choose one with --index")
            }
            let fromHost = trace.records.filter { $0.direction == .hostToController && $0.packet != nil }.count
            let fromController = trace.records.filter { $0.direction == .controllerToHost && $0.packet != nil }.count
            guard fromHost + fromController > 0 else { throw CLIError("\(file): no HCI packet with a direction to replay (a monitor trace of another kind, or empty)") }

            let listener: H4Listener
            do { listener = try H4Listener(host: host, port: port) } catch { throw CLIError("cannot listen on \(host):\(port): \(error)") }
            Interrupt.onSignal { listener.close() }
            report([("event", .string("listening")), ("address", .string("tcp:\(host):\(listener.port)")), ("frames", .int(trace.records.count)),
                    ("host_frames", .int(fromHost)), ("controller_frames", .int(fromController))],
                   "replaying \(file) (\(fromHost) frames from the host, \(fromController) from the controller); listening on tcp:\(host):\(listener.port) for a host")
            let side: ChannelTransport
            var logger = Logger(label: "btctl") { StreamLogHandler.standardError(label: $0) }
            logger.logLevel = .warning
            do { side = try await listener.accept(logger: logger) } catch {
                listener.close()
                if Interrupt.requested { return }
                throw CLIError("\(error)")
            }
            listener.close()
            report([("event", .string("connected"))], "host connected")

            // Made now: its watchdog counts the host's silence from here.
            var options = ReplayOptions(ordering: strictOrder ? .total : .perFlow, timeout: cliDuration(seconds: timeout))
            if advertisingIndependent { options.independentCommands = ReplayOptions.advertisingCommands }
            options.ignoredCommands = Set(ignored)
            let replay = ReplayTransport(trace: trace, options: options)
            // The host's packets, checked as they come; a mismatch fails the replay, which
            // then stops answering.
            let up = Task {
                do {
                    for try await p in side.inbound { try replay.sendNow([p]) }
                } catch {}
            }
            // The recording's controller packets, to the host in order (the host's
            // socket pushes back: nothing dropped).
            let down = Task {
                do {
                    for try await p in replay.inbound { try await side.send(p) }
                } catch {}
            }
            let settle = cliDuration(seconds: timeout)
            let (outcome, closedEarly) = await withTaskGroup(of: Void.self) { g -> (ReplayMismatch?, Bool) in
                g.addTask { await up.value }  // the host closed the connection, or sent a mismatch
                g.addTask { await down.value }  // a mismatch (the host's silence included)
                g.addTask {
                    // Every frame played: the host has `timeout` more to close or to send
                    // something the recording lacks. The replay tells when the last frame
                    // is played or a mismatch (the host's silence included) ends it; the
                    // other tasks' end cancels the wait. Each wait is bounded, and a
                    // replay still going after it (a session over an hour long) waits again.
                    while !Task.isCancelled, !replay.isComplete, replay.mismatch == nil, !replay.isClosed {
                        do { try await replay.finished(within: .seconds(3600)) } catch is CancellationError { return } catch {}
                    }
                    if replay.mismatch == nil, !Task.isCancelled { try? await Task.sleep(for: settle) }
                }
                g.addTask { await Interrupt.waitForSignal() }
                await g.next()
                // Where the host left the recording, before closing settles anything.
                // Neither a mismatch nor the end: the host closed early, or a signal came;
                // `finished(within: .zero)` names the packet due.
                var outcome = replay.mismatch, closedEarly = false
                if outcome == nil, !replay.isComplete {
                    do { try await replay.finished(within: .zero) } catch let m as ReplayMismatch {
                        outcome = m
                        closedEarly = true
                    } catch {}
                }
                // Closing both ends the two loops; then the other children can finish.
                await side.close()
                await replay.close()
                g.cancelAll()
                return (outcome, closedEarly)
            }
            if Interrupt.requested { return }

            guard let m = outcome else {
                report([("event", .string("matched")), ("frames", .int(trace.records.count)), ("host_frames", .int(fromHost))],
                       "matched: the host sent all \(fromHost) recorded frames and got all \(fromController) of the controller's")
                return
            }
            var o: [(String, JSONValue)] = [("event", .string("mismatch")), ("frame", .int(m.frame))]
            if let e = m.expected { o += [("expected", .string(m.expectedDecoded ?? "")), ("expected_h4", .string(e.h4Bytes.hexString))] }
            if let a = m.actual { o += [("actual", .string(m.actualDecoded ?? "")), ("actual_h4", .string(a.h4Bytes.hexString))] }
            if closedEarly {
                o.append(("host_closed", .bool(true)))
            } else if let s = m.silence {
                o.append(("silence_ms", .int(Int(s.components.seconds) * 1000 + Int(s.components.attoseconds / 1_000_000_000_000_000))))
            }
            if json { emit(.object(o)) }
            if closedEarly {
                throw CLIError("replay mismatch at frame \(m.frame): the host closed the connection; the recording has it send \(m.expectedDecoded ?? "more") [\(m.expected?.h4Bytes.hexString ?? "")]")
            }
            throw CLIError("\(m)")
        }

        /// A JSON object on stdout with --json, else the text on standard error (stdout stays free).
        private func report(_ o: [(String, JSONValue)], _ text: String) { announce(json: json, o, "btctl: \(text)") }
    }
}
