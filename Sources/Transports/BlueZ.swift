// The Linux kernel's Bluetooth sockets through CBlueZ: the HCI user channel (the
// whole stack in user space, exclusive), the HCI raw channel (shared with the
// kernel) and the adapter list. Every errno becomes a sentence a person can act on.

import CBlueZ
import HCI
import Logging
import NIOCore
import Snoop
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A failed Bluetooth socket operation, explained.
public struct BlueZError: Error, Equatable, Sendable, CustomStringConvertible {
    public var operation: String
    public var errno: Int32
    public var description: String

    /// Explains `errno` from `operation` on adapter `index` (nil: no particular adapter).
    public init(operation: String, errno e: Int32, index: UInt16? = nil, channel: HCIChannel? = nil,
                adapters: () -> [UInt16] = { (try? BlueZ.adapterIDs()) ?? [] }) {
        self.operation = operation
        self.errno = e
        let name = index.map { "hci\($0)" } ?? "the adapter"
        let base = "\(operation) failed: \(errnoString(e))"
        switch e {
        case EAFNOSUPPORT:
            description = "this kernel has no Bluetooth support (socket(AF_BLUETOOTH) fails with EAFNOSUPPORT): "
                + "load the module with `sudo modprobe bluetooth`, or use a kernel built with CONFIG_BT; "
                + "without one, use an H4 transport such as `--transport tcp:127.0.0.1:6402` (Rootcanal)"
        case EPERM, EACCES:
            let monitor = operation.contains("monitor")
            let cap = (channel == .raw || monitor) && !operation.contains("HCIDEV") ? "CAP_NET_RAW" : "CAP_NET_ADMIN"
            let what = monitor ? "the HCI monitor channel" : "\(name) on the \(channel?.rawValue ?? "HCI") channel"
            description = "\(base): opening \(what) needs \(cap); "
                + "run as root or grant it once: `sudo setcap 'cap_net_admin,cap_net_raw+eip' \"$(command -v btctl)\"`"
        case EBUSY:
            description = "\(base): \(name) is up or held by bluetoothd; the user channel needs it down and unclaimed: "
                + "`sudo btmgmt --index \(index ?? 0) power off` (or `sudo hciconfig \(name) down`), or stop bluetoothd "
                + "(`sudo systemctl stop bluetooth`); or share it with the kernel via `--transport \(name):raw`"
        case ENODEV:
            let present = adapters()
            let list = present.isEmpty ? "no adapters are present" : "present: " + present.map { "hci\($0)" }.joined(separator: ", ")
            description = "\(base): no such adapter \(name); \(list)"
        case ENETDOWN:
            description = "\(base): \(name) is powered off; the raw channel shares the adapter with the kernel, which must have it up: "
                + "`sudo btmgmt --index \(index ?? 0) power on` (or `sudo hciconfig \(name) up`)"
        case 132:  // ERFKILL
            description = "\(base): \(name) is blocked by rfkill: `sudo rfkill unblock bluetooth`"
        default:
            description = base
        }
    }
}

/// Which HCI socket channel to bind.
public enum HCIChannel: String, Sendable, Equatable {
    /// Exclusive: the kernel stack steps aside (needs the adapter down, CAP_NET_ADMIN).
    case user
    /// Shared with the kernel: we see all traffic and may send commands (CAP_NET_RAW).
    case raw
}

/// One adapter the kernel knows.
public struct AdapterInfo: Sendable, Equatable {
    public var index: UInt16
    public var name: String
    public var address: BluetoothAddress
    public var isUp: Bool
    /// HCI bus (0 virtual, 1 USB, 2 PCCARD, 3 UART, 4 RS232, 5 PCI, 6 SDIO, 7 SPI, 8 I2C, 9 SMD, 10 VIRTIO).
    public var bus: UInt8
    public var aclMTU: UInt16
    public var aclPackets: UInt16

    public var busName: String {
        let names = ["virtual", "usb", "pccard", "uart", "rs232", "pci", "sdio", "spi", "i2c", "smd", "virtio"]
        return Int(bus) < names.count ? names[Int(bus)] : "bus \(bus)"
    }
}

public enum BlueZ {
    /// A control socket for ioctls, or the explained error.
    static func controlSocket() throws -> Int32 {
        let fd = cbluez_hci_socket()
        guard fd >= 0 else { throw BlueZError(operation: "socket(AF_BLUETOOTH, BTPROTO_HCI)", errno: errno, adapters: { [] }) }
        return fd
    }

    public static func adapterIDs() throws -> [UInt16] {
        let fd = try controlSocket()
        defer { Glibc.close(fd) }
        var ids = [UInt16](repeating: 0, count: 16)
        let n = cbluez_hci_dev_list(fd, &ids, Int32(ids.count))
        guard n >= 0 else { throw BlueZError(operation: "HCIGETDEVLIST", errno: errno, adapters: { [] }) }
        return Array(ids.prefix(Int(n)))
    }

    /// The kernel's adapters. Throws `BlueZError` (EAFNOSUPPORT on a kernel without Bluetooth).
    public static func adapters() throws -> [AdapterInfo] {
        let fd = try controlSocket()
        defer { Glibc.close(fd) }
        var ids = [UInt16](repeating: 0, count: 16)
        let n = cbluez_hci_dev_list(fd, &ids, Int32(ids.count))
        guard n >= 0 else { throw BlueZError(operation: "HCIGETDEVLIST", errno: errno, adapters: { [] }) }
        var out: [AdapterInfo] = []
        for id in ids.prefix(Int(n)) {
            var di = cbluez_dev_info()
            guard cbluez_hci_dev_info(fd, id, &di) == 0 else { continue }
            let name = withUnsafeBytes(of: di.name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            let addr = withUnsafeBytes(of: di.bdaddr) { Array($0) }
            out.append(AdapterInfo(
                index: id, name: name, address: (try? BluetoothAddress(wireBytes: addr)) ?? .zero,
                isUp: di.flags & 1 != 0, bus: di.type & 0x0F, aclMTU: di.acl_mtu, aclPackets: di.acl_pkts))
        }
        return out
    }

    /// Powers adapter `index` up or down (HCIDEVUP / HCIDEVDOWN; needs CAP_NET_ADMIN).
    public static func setPower(index: UInt16, on: Bool) throws {
        let fd = try controlSocket()
        defer { Glibc.close(fd) }
        let rc = on ? cbluez_hci_dev_up(fd, index) : cbluez_hci_dev_down(fd, index)
        guard rc == 0 || errno == EALREADY else {
            throw BlueZError(operation: on ? "powering hci\(index) up (HCIDEVUP)" : "bringing hci\(index) down (HCIDEVDOWN)", errno: errno, index: index)
        }
    }

    /// Opens adapter `index` on an HCI socket channel as a transport. For the user
    /// channel the adapter is brought down first (the kernel requires it).
    public static func open(index: UInt16, channel: HCIChannel, on loop: (any EventLoop)? = nil, logger: Logger) throws -> ChannelTransport {
        let fd = cbluez_hci_socket()
        guard fd >= 0 else { throw BlueZError(operation: "socket(AF_BLUETOOTH, BTPROTO_HCI)", errno: errno, index: index, channel: channel) }
        /// Closes the socket and throws the explained errno when a step failed.
        func check(_ ok: Bool, _ operation: String) throws {
            guard !ok else { return }
            let e = errno
            Glibc.close(fd)
            throw BlueZError(operation: operation, errno: e, index: index, channel: channel)
        }
        switch channel {
        case .user:
            try check(cbluez_hci_dev_down(fd, index) == 0 || errno == EALREADY || errno == EBUSY,
                      "bringing hci\(index) down (HCIDEVDOWN)")
            try check(cbluez_hci_bind(fd, index, UInt16(CBLUEZ_HCI_CHANNEL_USER)) == 0, "binding hci\(index) user channel")
        case .raw:
            // The raw channel shares a running adapter with the kernel: power it up if it is down.
            try check(cbluez_hci_dev_up(fd, index) == 0 || errno == EALREADY, "powering hci\(index) up (HCIDEVUP)")
            try check(cbluez_hci_bind(fd, index, UInt16(CBLUEZ_HCI_CHANNEL_RAW)) == 0, "binding hci\(index) raw channel")
            try check(cbluez_hci_set_filter_all(fd) == 0, "setting the HCI filter on hci\(index)")
        }
        return ChannelTransport(fd: fd, kind: .packetSocket, label: "hci\(index)\(channel == .raw ? ":raw" : "")", on: loop, logger: logger)
    }
}

/// The kernel's HCI monitor channel, what btmon reads: every adapter's traffic (and
/// adapters coming and going, system notes) as the kernel's Bluetooth stack sees it,
/// read-only, alongside whoever uses the adapters. Needs CAP_NET_RAW.
public final class KernelMonitor: Sendable {
    private let fd: Int32
    private let closed = Atomic<Bool>(false)

    public init() throws {
        let fd = cbluez_hci_socket()
        guard fd >= 0 else { throw BlueZError(operation: "socket(AF_BLUETOOTH, BTPROTO_HCI) for the monitor channel", errno: errno) }
        guard cbluez_hci_bind(fd, 0xFFFF, UInt16(CBLUEZ_HCI_CHANNEL_MONITOR)) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw BlueZError(operation: "binding the HCI monitor channel", errno: e)
        }
        self.fd = fd
    }

    /// Reads records until `close()` (seen within 200 ms: the socket is polled), handing
    /// each to `body` (blocking; call it from a thread of its own). One datagram is a
    /// 6-byte header (opcode, adapter index, length, little-endian) and its payload; one
    /// receive buffer serves every datagram.
    public func read(timestampMicros: () -> Int64, _ body: (TraceRecord) -> Void) throws {
        var buffer = [UInt8](repeating: 0, count: 6 + 65_536)
        while !closed.load(ordering: .acquiring) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = Glibc.poll(&p, 1, 200)
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                if e == EBADF || e == EINVAL { return }
                throw BlueZError(operation: "reading the HCI monitor channel", errno: e)
            }
            if n == 0 { return }
            let ts = timestampMicros()
            guard n >= 6 else {
                body(TraceRecord(timestampMicros: ts, direction: .unknown, content: .undecodable(
                    type: nil, bytes: Array(buffer[..<n]), error: .truncated(what: "monitor header", offset: 0, needed: 6, available: n))))
                continue
            }
            let opcode = UInt16(buffer[0]) | UInt16(buffer[1]) << 8
            let index = UInt16(buffer[2]) | UInt16(buffer[3]) << 8
            let length = Int(UInt16(buffer[4]) | UInt16(buffer[5]) << 8)
            body(TraceReader.monitorRecord(index: index, opcode: opcode, data: Array(buffer[6..<min(n, 6 + length)]), ts: ts))
        }
    }

    /// Ends `read`; the socket closes with this object.
    public func close() { closed.store(true, ordering: .releasing) }

    deinit { Glibc.close(fd) }
}

