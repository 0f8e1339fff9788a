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

@main
struct BTCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "btctl",
        abstract: "Drive a Bluetooth LE controller over HCI, and read HCI traces.",
        subcommands: [Demo.self, Info.self, List.self, Scan.self, Advertise.self, Trace.self, Gatt.self, L2CAP_.self, Pair.self, Bonds.self])
}

/// Options every controller-facing command takes.
struct ControllerOptions: ParsableArguments {
    @Option(name: [.customShort("t"), .long], help: ArgumentHelp("Controller transport: \(TransportSpec.help). Default: $BTCTL_TRANSPORT, else hci0.", valueName: "SPEC"))
    var transport: String?

    @Flag(help: "One JSON object per line on stdout.")
    var json = false

    @Option(help: ArgumentHelp("Record the session's HCI traffic to a btsnoop file.", valueName: "FILE"))
    var btsnoop: String?

    @Option(help: ArgumentHelp("Command timeout in seconds.", valueName: "SECONDS"))
    var timeout: Double = 5

    @Flag(name: .shortAndLong, help: "Log protocol traffic to stderr.")
    var verbose = false

    var spec: TransportSpec {
        get throws {
            let s = transport ?? ProcessInfo.processInfo.environment["BTCTL_TRANSPORT"] ?? "hci0"
            do { return try TransportSpec(parsing: s) } catch { throw ValidationError("\(error)") }
        }
    }

    var logger: Logger {
        var l = Logger(label: "btctl") { StreamLogHandler.standardError(label: $0) }
        l.logLevel = verbose ? .trace : .warning
        return l
    }

    /// Opens the transport, wrapped in a recording tap when --btsnoop is given.
    func openTransport() throws -> (any HCITransport, TraceFileWriter?) {
        let spec = try spec
        guard timeout > 0, timeout.isFinite else { throw ValidationError("--timeout must be a positive number of seconds") }
        let base: any HCITransport
        do { base = try spec.open(logger: logger) } catch { throw CLIError("cannot open \(spec): \(error)") }
        guard let path = btsnoop else { return (base, nil) }
        let w = try TraceFileWriter(path: path)
        return (RecordingTransport(wrapping: base, writer: w), w)
    }

    var commandTimeout: Duration { cliDuration(seconds: timeout) }

    /// A controller on the transport (for the commands below the facade: info, gatt).
    func openController() async throws -> (HCIController, TraceFileWriter?) {
        let (t, w) = try openTransport()
        return (HCIController(transport: t, commandTimeout: commandTimeout, logger: logger), w)
    }

    /// A facade host on the transport, not started.
    func openHost() async throws -> (BluetoothHost, TraceFileWriter?) {
        let (t, w) = try openTransport()
        return (BluetoothHost(transport: t, logger: logger, commandTimeout: commandTimeout), w)
    }
}

/// An error for a person: printed to stderr as is, exit status 1.
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Seconds from the command line as a Duration, clamped to 0...1 year so that no value
/// (1e300, inf; NaN becomes 0) can trap the conversion.
func cliDuration(seconds: Double) -> Duration {
    let s = seconds.isNaN ? 0 : Swift.min(Swift.max(seconds, 0), 31_536_000)
    return .milliseconds(Int(s * 1000))
}

func emit(_ json: JSONValue) {
    print(json.rendered)
}
