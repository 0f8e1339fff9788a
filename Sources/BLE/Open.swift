// Opening a host from a transport spec, as btctl's --transport takes it:
// hci0 (user channel), hci0:raw, tcp:HOST:PORT (H4, e.g. Rootcanal), unix:PATH,
// serial:PATH[@BAUD]. The in-process virtual radio is BLETesting's `VirtualRadio`.

import HCI
import Logging
import Snoop
import Transports

extension BluetoothHost {
    /// A host on the controller `spec` names (not started). Throws a `TransportSpec`
    /// parse error or the transport's own error (with what to do about it).
    public static func open(_ spec: String, logger: Logger = Logger(label: "ble"), commandTimeout: Duration = .seconds(5),
                            security: SecurityOptions = SecurityOptions()) throws -> BluetoothHost {
        let transport = try TransportSpec(parsing: spec).open(logger: logger)
        return BluetoothHost(transport: transport, logger: logger, commandTimeout: commandTimeout, security: security)
    }

    /// A host on the controller `spec` names, recording its whole HCI conversation to
    /// `path` (btsnoop, or pcap / pcapng by the extension; the file is created or
    /// truncated). The recording is complete and closed when the host closes.
    public static func open(_ spec: String, recordingTo path: String, logger: Logger = Logger(label: "ble"),
                            commandTimeout: Duration = .seconds(5), security: SecurityOptions = SecurityOptions()) throws -> BluetoothHost {
        let transport = try TransportSpec(parsing: spec).open(logger: logger)
        do {
            return try BluetoothHost(transport: transport, recordingTo: path, logger: logger, commandTimeout: commandTimeout, security: security)
        } catch {
            // Opened for this host: not left open behind a file that could not be created.
            Task { await transport.close() }
            throw error
        }
    }

    /// A host over `transport` (any: a kernel socket, Rootcanal, the virtual radio, a
    /// replay) recording its conversation to `path`, as `open(_:recordingTo:)` does.
    public init(transport: any HCITransport, recordingTo path: String, logger: Logger = Logger(label: "ble"),
                commandTimeout: Duration = .seconds(5), extendedCommands: ExtendedCommandsPolicy = .automatic, attMTU: UInt16 = 517,
                security: SecurityOptions = SecurityOptions()) throws {
        self.init(transport: try RecordingTransport(wrapping: transport, recordingTo: path), logger: logger, commandTimeout: commandTimeout,
                  extendedCommands: extendedCommands, attMTU: attMTU, security: security)
    }

    /// The specs `open` understands, for help texts.
    public static var transportHelp: String { TransportSpec.help }
}
