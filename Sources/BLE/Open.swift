// Opening a host from a transport spec, as btctl's --transport takes it:
// hci0 (user channel), hci0:raw, tcp:HOST:PORT (H4, e.g. Rootcanal), unix:PATH,
// serial:PATH[@BAUD]. The in-process virtual radio is BLETesting's `VirtualRadio`.

import HCI
import Logging
import Transports

extension BluetoothHost {
    /// A host on the controller `spec` names (not started). Throws a `TransportSpec`
    /// parse error or the transport's own error (with what to do about it).
    public static func open(_ spec: String, logger: Logger = Logger(label: "ble"), commandTimeout: Duration = .seconds(5)) throws -> BluetoothHost {
        let transport = try TransportSpec(parsing: spec).open(logger: logger)
        return BluetoothHost(transport: transport, logger: logger, commandTimeout: commandTimeout)
    }

    /// The specs `open` understands, for help texts.
    public static var transportHelp: String { TransportSpec.help }
}
