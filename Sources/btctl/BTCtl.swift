// btctl: the command line over the library. Thin: parse, call the library, print.
// Conventions (docs/btctl.md): --transport/-t on every command (default
// $BTCTL_TRANSPORT, else hci0), --json for one JSON object per line on stdout,
// --btsnoop FILE to record the session, errors on stderr with a non-zero exit.

import ArgumentParser
import BLE
import Foundation
import HCI
import Logging
import Snoop
import Transports
import VirtualHCI

@main
struct BTCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "btctl",
        abstract: "Drive a Bluetooth LE controller over HCI, and read HCI traces.",
        discussion: """
        Exit status: 0 success; 1 the operation failed (the reason is on stderr); 64 a \
        command-line error (the command's usage follows); 130 interrupted by SIGINT, 143 by \
        SIGTERM, after the command cleaned up (scanning and advertising stopped, links \
        disconnected, the trace closed). A second signal exits at once.
        """,
        version: btctlVersion,
        subcommands: [Demo.self, Info.self, LEInfo.self, List.self, Scan.self, Sync.self, Advertise.self, Monitor.self, HCICommandLine.self, Radio.self, Trace.self, Gatt.self, Shell.self, L2CAP_.self, Pair.self, Bonds.self])

    /// Parses, runs, and exits with the documented status. A validation error a command
    /// finds while running is reported with that command's usage, like a parse error.
    static func main() async {
        Interrupt.install()
        var command: any ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            exit(withError: error)
        }
        do {
            if var c = command as? any AsyncParsableCommand { try await c.run() } else { try command.run() }
        } catch is StandardOutputClosed {
            // The reader went away (`| head`): nothing more to say.
        } catch {
            await exitIfInterrupted()
            // What the command printed comes before the error that ended it (a summary
            // before "the controller went away"), redirected output too.
            fflush(nil)
            if let v = error as? ValidationError {
                FileHandle.standardError.write(Data("Error: \(v.message)\n\(usageString(for: type(of: command)))\n  See 'btctl \(commandPath(type(of: command))) --help' for more.\n".utf8))
                Foundation.exit(ExitCode.validationFailure.rawValue)
            }
            exit(withError: error)
        }
        await exitIfInterrupted()
    }

    /// After a signal, however the command ended: let its cleanups finish, exit 128 + signal.
    static func exitIfInterrupted() async {
        guard let status = Interrupt.exitStatus else { return }
        await Interrupt.finishCleanups()
        Foundation.exit(status)
    }

    /// "gatt read" for `Gatt.Read`: the words that select a subcommand.
    static func commandPath(_ type: any ParsableCommand.Type) -> String {
        func path(_ t: any ParsableCommand.Type, in node: any ParsableCommand.Type) -> [String]? {
            if t == node { return [] }
            for sub in node.configuration.subcommands {
                if let rest = path(t, in: sub) { return [sub._commandName] + rest }
            }
            return nil
        }
        return (path(type, in: BTCtl.self) ?? []).joined(separator: " ")
    }
}

/// What `btctl --version` prints.
let btctlVersion = "0.2.0"

/// Options every controller-facing command takes.
struct ControllerOptions: ParsableArguments {
    @Option(name: [.customShort("t"), .long], help: ArgumentHelp("Controller transport: \(TransportSpec.help), virtual (the in-process radio, with a fire-alarm sender on it as a peer), virtual5 (the same with Bluetooth 5 controllers: extended advertising, scanning and connecting). Default: $BTCTL_TRANSPORT, else hci0.", valueName: "SPEC"))
    var transport: String?

    @Flag(help: "One JSON object per line on stdout.")
    var json = false

    @Option(help: ArgumentHelp("Record the session's HCI traffic to a btsnoop file.", valueName: "FILE"))
    var btsnoop: String?

    @Option(help: ArgumentHelp("Record the session's HCI traffic as pcap (link type 201, what Wireshark reads); - streams it to stdout, e.g. `| wireshark -k -i -` (then stdout carries nothing else).", valueName: "FILE"))
    var pcap: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Command timeout in seconds (0.01 to 3600).", valueName: "SECONDS"))
    var timeout: Double = 5

    @Flag(name: .shortAndLong, help: "Log protocol traffic to stderr.")
    var verbose = false

    func validate() throws {
        guard timeout.isFinite, (0.01...3600).contains(timeout) else { throw ValidationError("--timeout must be between 0.01 and 3600 seconds, not \(timeout)") }
        if btsnoop != nil, pcap != nil { throw ValidationError("give --btsnoop or --pcap, not both") }
        if pcap == "-", json { throw ValidationError("--pcap - writes the capture to stdout, so --json cannot go there too") }
        _ = try transportChoice
    }

    /// Where the controller is: a transport spec, or the in-process virtual radio.
    /// `virtual(extended:)`: the radio's controllers have the extended advertising commands.
    enum TransportChoice { case spec(TransportSpec), virtual(extended: Bool) }

    var transportChoice: TransportChoice {
        get throws {
            let s = transport ?? ProcessInfo.processInfo.environment["BTCTL_TRANSPORT"] ?? "hci0"
            if s == "virtual" || s == "virtual5" { return .virtual(extended: s == "virtual5") }
            do { return .spec(try TransportSpec(parsing: s)) } catch {
                throw ValidationError("--transport: \(error)\(transport == nil ? " (from $BTCTL_TRANSPORT)" : ""), or virtual, or virtual5")
            }
        }
    }

    /// The transport as a person wrote it (for messages).
    var transportName: String {
        switch try? transportChoice {
        case let .spec(s)?: return s.description
        case let .virtual(extended)?: return extended ? "virtual5" : "virtual"
        case nil: return transport ?? "?"
        }
    }

    var logger: Logger {
        var l = Logger(label: "btctl") { StreamLogHandler.standardError(label: $0) }
        l.logLevel = verbose ? .trace : .warning
        return l
    }

    /// Opens the transport, wrapped in a recording tap when --btsnoop or --pcap is given.
    /// The recording is closed (complete) on SIGINT/SIGTERM after the command's cleanups.
    func openTransport() async throws -> (any HCITransport, TraceFileWriter?) {
        let base = try await openBaseTransport()
        let w: TraceFileWriter?
        do { w = try openRecording() } catch {
            await base.close()
            throw error
        }
        guard let w else { return (base, nil) }
        return (RecordingTransport(wrapping: base, writer: w), w)
    }

    /// The transport alone, not recorded.
    func openBaseTransport() async throws -> any HCITransport {
        switch try transportChoice {
        case let .virtual(extended):
            return try await VirtualPeer.controller(logger: logger, extendedAdvertising: extended)
        case let .spec(spec):
            do { return try spec.open(logger: logger) } catch { throw CLIError("cannot open \(spec): \(error)") }
        }
    }

    /// The --btsnoop or --pcap file (nil without either), closed at exit on a signal.
    /// `monitor`: the Linux monitor link (btsnoop 2001, pcap 254), which keeps the
    /// adapter index and the records that are not HCI packets.
    func openRecording(monitor: Bool = false) throws -> TraceFileWriter? {
        guard let path = btsnoop ?? pcap else { return nil }
        let output: TraceEncoder.Output = pcap != nil
            ? .pcap(linkType: monitor ? TraceFormat.linkTypeMonitor : TraceFormat.linkTypeH4WithPHDR)
            : .btsnoop(datalink: monitor ? TraceFormat.btsnoopMonitor : TraceFormat.btsnoopH4)
        let w: TraceFileWriter
        do { w = try TraceFileWriter(path: path, output: output) } catch { throw CLIError("cannot record to \(path): \(error)") }
        Interrupt.atExit { w.close() }
        return w
    }

    var commandTimeout: Duration { cliDuration(seconds: timeout) }

    /// A controller on the transport (for the commands below the facade: info, l2cap listen).
    /// On a signal it is closed (after the command's own cleanups).
    func openController() async throws -> (HCIController, TraceFileWriter?) {
        let (t, w) = try await openTransport()
        let controller = HCIController(transport: t, commandTimeout: commandTimeout, logger: logger)
        Interrupt.atExit { await controller.close() }
        return (controller, w)
    }

    /// A facade host on the transport, not started. On a signal it shuts down: scans and
    /// advertising stop, links are disconnected, then it closes.
    func openHost(security: SecurityOptions = SecurityOptions(), deviceName: String = "swift-ble-host", attMTU: UInt16 = 517,
                  enhancedATT: Bool = false, preferredConnectionParameters: PreferredConnectionParameters? = nil,
                  requestsPreferredParameters: Bool = false) async throws -> (BluetoothHost, TraceFileWriter?) {
        let (t, w) = try await openTransport()
        let host = BluetoothHost(transport: t, logger: logger, commandTimeout: commandTimeout, attMTU: attMTU, security: security, deviceName: deviceName,
                                 enhancedATT: enhancedATT, preferredConnectionParameters: preferredConnectionParameters,
                                 requestsPreferredParameters: requestsPreferredParameters)
        Interrupt.onSignal { await host.shutdown() }
        return (host, w)
    }
}

/// An error for a person: printed to stderr as is, exit status 1.
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// A 16-bit number from the command line: `0x` and hex digits, or decimal digits
/// (ASCII only, no sign); nil otherwise. Handles, SPSMs.
func cliUInt16(_ s: String) -> UInt16? {
    if s.lowercased().hasPrefix("0x") { return UInt16(hexDigits: s.dropFirst(2)) }
    guard !s.isEmpty, s.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
    return UInt16(s)
}

/// Seconds from the command line as a Duration, clamped to 0...1 year so that no value
/// (1e300, inf; NaN becomes 0) can trap the conversion.
func cliDuration(seconds: Double) -> Duration {
    let s = seconds.isNaN ? 0 : Swift.min(Swift.max(seconds, 0), 31_536_000)
    return .milliseconds(Int(s * 1000))
}

/// A message for the person on stderr ("btctl: ..."), never on stdout.
func note(_ text: String) {
    FileHandle.standardError.write(Data("btctl: \(text)\n".utf8))
}

/// An event said as it happens: with --json a line on stdout, written out at once (a
/// program reading through a pipe, where stdout is block-buffered, may be waiting for
/// it: a port to connect to, a prompt to answer); otherwise `text` on standard error,
/// with a newline unless it ends in a space (a prompt answered on the same line).
func announce(json: Bool, _ fields: [(String, JSONValue)], _ text: String) {
    if json {
        emit(.object(fields))
        fflush(nil)
    } else {
        FileHandle.standardError.write(Data((text.hasSuffix(" ") ? text : text + "\n").utf8))
    }
}

/// A progress line on standard error when it is a terminal (never in --json mode, never
/// into a pipe or file): rewritten in place at most ten times a second, cleared before
/// the closing summary. When standard output is the same terminal, `willPrint()` erases
/// the line before each output line and the next `update` draws it again below, so the
/// two never mix; `willNote()` does the same before a note on standard error. Only the
/// task that owns it writes (or whoever holds the lock it is kept under).
struct LiveStatus {
    let enabled: Bool
    private let sharesTerminal: Bool
    private var last = ContinuousClock.now - .seconds(1)
    private var shown = false
    private var erased = false

    init(json: Bool) {
        enabled = !json && isatty(2) != 0
        sharesTerminal = enabled && isatty(1) != 0
    }

    /// Shows `text()` if a tenth of a second has passed since the last update, or at
    /// once if `willPrint()` erased the line.
    mutating func update(_ text: @autoclosure () -> String) {
        guard enabled else { return }
        let now = ContinuousClock.now
        guard erased || now - last >= .milliseconds(100) else { return }
        (last, shown, erased) = (now, true, false)
        FileHandle.standardError.write(Data("\r\u{1B}[K\(text())".utf8))
    }

    /// Call before writing a line to standard output.
    mutating func willPrint() {
        guard sharesTerminal, shown else { return }
        clear()
        erased = true
    }

    /// Call before writing a note to standard error, the line's own stream.
    mutating func willNote() {
        guard shown else { return }
        clear()
        erased = true
    }

    /// Erases the line (before the summary is printed).
    mutating func clear() {
        guard shown else { return }
        shown = false
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}

/// Seconds since `start`, to a tenth (closing summaries).
func tenthsOfSecondsSince(_ start: ContinuousClock.Instant) -> Double {
    let d = ContinuousClock.now - start
    return ((Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18) * 10).rounded() / 10
}

/// "1.2 KiB", "3.4 MiB": a byte count for a person.
func bytesText(_ n: Int) -> String {
    if n < 1024 { return "\(n) B" }
    if n < 1024 * 1024 { return String(format: "%.1f KiB", Double(n) / 1024) }
    return String(format: "%.1f MiB", Double(n) / 1_048_576)
}

/// "10 s", "2.5 s".
func secondsText(_ s: Double) -> String {
    s == s.rounded() && abs(s) < 1e15 ? "\(Int(s)) s" : String(format: "%.1f s", s)
}

func emit(_ json: JSONValue) {
    print(json.rendered)
}
