// btctl hci: send one HCI command as given, opcode and parameter bytes, and show
// every packet that passes, decoded as `trace show` decodes it, until the controller
// answers (Command Complete or Command Status for that opcode); with --events, the
// events that follow too. What `hcitool cmd` does, with btmon's view of the answer.
// No initialisation: the controller gets this command (and Reset first with --reset)
// and nothing else.

import ArgumentParser
import Foundation
import HCI
import Snoop
import Synchronization

struct HCICommandLine: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hci",
        abstract: "Send one HCI command, raw, and show the controller's answer decoded.",
        discussion: """
            COMMAND is an opcode (0x2002), OGF:OCF in hex (0x08:0x0002, as hcitool takes \
            them), or the specification's name, case, spacing and an HCI_ prefix aside \
            ("LE Read Buffer Size", le-read-buffer-size, HCI_LE_Read_Buffer_Size). \
            PARAMETERS are the command's parameter bytes in hex, in the order they go on \
            the wire (a multi-octet field least significant octet first, as the \
            specification lays it out): `01 00`, `0100` or `0x01 0x00`; at most 255. \
            Nothing else is sent: no initialisation (--reset sends Reset first). Every \
            packet sent and received prints as `trace show` prints it (--json: one object \
            per frame, docs/schemas/trace-show.schema.json) until the Command Complete or \
            Command Status for COMMAND; with --events, the events that come after it too \
            (e.g. LE Connection Complete after LE Create Connection). Exit status 1 when \
            the answer's status is not Success, or none comes within --timeout.
            """)

    @OptionGroup var options: ControllerOptions

    @Argument(help: ArgumentHelp("The command: opcode (0x2002), OGF:OCF (0x08:0x0002) or name (\"LE Read Buffer Size\").", valueName: "COMMAND"))
    var command: String

    @Argument(help: ArgumentHelp("Its parameter bytes in hex, in wire order (01 00, 0100 or 0x01 0x00).", valueName: "PARAMETERS"))
    var parameters: [String] = []

    @Flag(help: "Send Reset first, and the command once Reset is answered.")
    var reset = false

    @Option(parsing: .unconditional, help: ArgumentHelp("After the answer, keep showing what the controller sends for this many seconds, 0.1 to 86400.", valueName: "SECONDS"))
    var events: Double?

    @Flag(help: "One line per frame, without the decoded fields.")
    var brief = false

    func validate() throws {
        _ = try Self.parse(command: command, parameters: parameters)
        if let e = events, !(e.isFinite && (0.1...86_400).contains(e)) { throw ValidationError("--events must be between 0.1 and 86400 seconds, not \(e)") }
    }

    /// The opcode and parameter bytes a command line names.
    static func parse(command: String, parameters: [String]) throws -> (HCIOpcode, [UInt8]) {
        guard let opcode = HCIOpcode(parsing: command) else {
            throw ValidationError("COMMAND takes an opcode (0x2002), OGF:OCF (0x08:0x0002) or a command's name (\"LE Read Buffer Size\"), not '\(command)'")
        }
        var bytes: [UInt8] = []
        for p in parameters {
            // ASCII hex digits only (Character.isHexDigit also takes fullwidth ones,
            // which no radix-16 parse reads); the one hex reader makes the bytes.
            let digits = p.lowercased().hasPrefix("0x") ? String(p.dropFirst(2)) : p
            guard !digits.isEmpty, digits.unicodeScalars.allSatisfy(\.properties.isASCIIHexDigit),
                  let parsed = [UInt8](hex: digits) else {
                throw ValidationError("PARAMETERS are bytes in hex, two digits each (01 00, 0100, 0x01), not '\(p)'")
            }
            bytes += parsed
        }
        guard bytes.count <= 255 else { throw ValidationError("an HCI command carries at most 255 parameter bytes, not \(bytes.count)") }
        return (opcode, bytes)
    }

    /// How the controller answered a command (§7.7.14, §7.7.15).
    enum Answer: Sendable, Equatable {
        /// Command Complete; the status is the return parameters' first octet (nil when
        /// there are none: NOP, or a vendor command without one).
        case complete(status: HCIStatus?)
        case status(HCIStatus)

        var status: HCIStatus? {
            switch self {
            case let .complete(s): return s
            case let .status(s): return s
            }
        }
    }

    /// The command `packet` answers, and how; nil for any other packet (a malformed
    /// event answers nothing: it is shown as the decoder shows it).
    static func answer(in packet: HCIPacket) -> (HCIOpcode, Answer)? {
        guard case .event = packet, let event = try? HCIEvent(packet) else { return nil }
        switch event {
        case let .commandComplete(cc) where cc.commandOpcode.rawValue != 0:
            return (cc.commandOpcode, .complete(status: cc.returnParameters.first.map(HCIStatus.init(rawValue:))))
        case let .commandStatus(cs) where cs.commandOpcode.rawValue != 0:
            return (cs.commandOpcode, .status(cs.status))
        default:
            return nil
        }
    }

    func run() async throws {
        let (opcode, bytes) = try Self.parse(command: command, parameters: parameters)
        let printer = Monitor.Printer(json: options.json, brief: brief, quiet: options.pcap == "-", types: [], handle: nil, index: nil,
                                      writer: try options.openRecording())
        let transport = try await options.openBaseTransport()
        Interrupt.onSignal { await transport.close() }
        let ended = FirstReason()
        let now = RecordingTransport.wallClockMicros
        // Answers, in order; a CLI waits for one at a time, so a few is plenty.
        let (answers, answered) = AsyncStream.makeStream(of: (HCIOpcode, Answer).self, bufferingPolicy: .bufferingOldest(64))
        let reader = Task {
            defer { answered.finish() }
            do {
                for try await p in transport.inbound {
                    guard printer.take(TraceRecord(timestampMicros: now(), packet: p, direction: .controllerToHost)) else {
                        return ended.set(Monitor.outputClosed)
                    }
                    if let a = Self.answer(in: p) { answered.yield(a) }
                }
                ended.set("the transport was closed")
            } catch TransportError.endOfStream {
                ended.set("the controller closed the connection")
            } catch {
                ended.set("\(error)")
            }
        }
        func close() async {
            await transport.close()
            await reader.value
        }
        /// Sends one command and waits for its answer within --timeout.
        func exchange(_ opcode: HCIOpcode, _ parameters: [UInt8]) async throws -> Answer {
            let packet = HCIPacket.command(opcode: opcode, parameters: parameters)
            printer.take(TraceRecord(timestampMicros: now(), packet: packet, direction: .hostToController))
            do { try await transport.send(packet) } catch { throw CLIError("sending \(opcode) on \(options.transportName) failed: \(error)") }
            let answer = await withTaskGroup(of: Answer?.self) { g in
                g.addTask {
                    for await (o, a) in answers where o == opcode { return a }
                    return nil
                }
                g.addTask {
                    await Interrupt.sleep(for: options.commandTimeout)
                    return nil
                }
                let first = await g.next() ?? nil
                g.cancelAll()
                return first
            }
            guard let answer else {
                if Interrupt.requested { throw CLIError("interrupted before \(opcode) was answered") }
                throw CLIError(ended.reason.map { "\(opcode) was not answered: \($0)" } ?? "\(opcode) was not answered within \(options.timeout) s")
            }
            return answer
        }
        do {
            if reset {
                let r = try await exchange(.reset, [])
                if let s = r.status, !s.isSuccess { throw CLIError("Reset: \(s)") }
            }
            let answer = try await exchange(opcode, bytes)
            if let s = answer.status, !s.isSuccess { throw CLIError("\(opcode): \(s)") }
            if let events {
                // The reader keeps showing what comes; the transport's end (which finishes
                // `answers`) stops it early.
                await withTaskGroup(of: Void.self) { g in
                    g.addTask { await Interrupt.sleep(for: cliDuration(seconds: events)) }
                    g.addTask { for await _ in answers {} }
                    await g.next()
                    g.cancelAll()
                }
            }
        } catch {
            await close()
            throw error
        }
        await close()
    }
}
