// The kernel's L2CAP sockets (AF_BLUETOOTH, BTPROTO_L2CAP, SOCK_SEQPACKET) through
// CBlueZ: on the ATT fixed channel (CID 0x0004), where we exchange whole ATT PDUs,
// and on an SPSM, a connection-oriented channel in LE credit-based mode
// (BT_MODE_LE_FLOWCTL) or enhanced credit-based mode (BT_MODE_EXT_FLOWCTL), where we
// exchange whole SDUs and the kernel cuts K-frames and keeps the credits. Connecting
// makes the kernel create the LE link as central; listening accepts centrals that
// connect to an advertising adapter. The ATT bearer (`KernelATTChannel`) and the
// channel backend (`KernelL2CAPChannel`) are built on this type.

import CBlueZ
import HCI
#if canImport(Glibc)
import Glibc
#endif

/// An L2CAP LE address type as the kernel's sockaddr_l2 wants it.
extension AddressType {
    var l2capBdaddrType: UInt8 {
        self == .random || self == .randomIdentity ? UInt8(CBLUEZ_BDADDR_LE_RANDOM) : UInt8(CBLUEZ_BDADDR_LE_PUBLIC)
    }
}

/// The ATT fixed channel's socket is the same type.
public typealias KernelATTSocket = KernelL2CAPSocket

/// The kernel's credit-based modes for a channel socket (its `BT_MODE`).
public enum KernelChannelMode: Sendable, Hashable {
    /// LE credit-based flow control (Vol 3, Part A, §3.4.3): one channel per request.
    case le
    /// Enhanced credit-based flow control (§3.4.4); the kernel needs its
    /// `enable_ecred` module parameter (/sys/module/bluetooth/parameters/enable_ecred).
    case enhanced
}

public final class KernelL2CAPSocket: @unchecked Sendable {
    /// The descriptor; SOCK_SEQPACKET: one read is one PDU or SDU, one write is one.
    public let fd: Int32
    public let peer: BluetoothAddress?
    public let peerType: AddressType?
    /// "ATT PDU" or "SDU", for error messages.
    private let unit: String
    private var closed = false

    private init(fd: Int32, peer: BluetoothAddress?, peerType: AddressType?, unit: String = "ATT PDU") {
        self.fd = fd
        self.peer = peer
        self.peerType = peerType
        self.unit = unit
    }

    /// A socket bound to `spsm` on the adapter `local` (nil: any), in `mode`, that
    /// takes SDUs up to `receiveMTU`, with the kernel's `BT_SECURITY` level (1 low,
    /// 2 medium: encrypted, 3 high: authenticated, 4 FIPS: Secure Connections).
    private static func channelSocket(spsm: UInt16, local: BluetoothAddress?, type: AddressType, mode: KernelChannelMode,
                                      receiveMTU: UInt16, securityLevel: UInt8?) throws -> Int32 {
        let fd = try socket("socket(AF_BLUETOOTH, BTPROTO_L2CAP)")
        guard cbluez_l2cap_bind_psm(fd, local?.bytes ?? [0, 0, 0, 0, 0, 0], type.l2capBdaddrType, spsm) == 0 else {
            throw closing(fd, "binding SPSM 0x\(hex4(spsm))")
        }
        // After bind: the kernel takes BT_MODE only from a bound socket.
        if mode == .enhanced, cbluez_l2cap_set_mode(fd, UInt8(CBLUEZ_BT_MODE_EXT_FLOWCTL)) != 0 {
            throw closing(fd, "choosing enhanced credit-based mode (BT_MODE)")
        }
        guard cbluez_l2cap_set_receive_mtu(fd, receiveMTU) == 0 else { throw closing(fd, "setting the receive MTU (BT_RCVMTU)") }
        if let securityLevel, cbluez_l2cap_set_security(fd, securityLevel, 0) != 0 { throw closing(fd, "setting the security level (BT_SECURITY)") }
        return fd
    }

    /// Opens a channel to `peer`'s `spsm` as central (the kernel creates the LE link if
    /// there is none), offering `receiveMTU`. Throws `L2CAPError`: ECONNREFUSED when the
    /// peer refused (no server on the SPSM, no resources), EACCES for security.
    public static func connect(to peer: BluetoothAddress, type: AddressType, spsm: UInt16, mode: KernelChannelMode = .le,
                               receiveMTU: UInt16 = 2048, securityLevel: UInt8? = nil, from local: BluetoothAddress? = nil) throws -> KernelL2CAPSocket {
        let fd = try channelSocket(spsm: 0, local: local, type: .public, mode: mode, receiveMTU: receiveMTU, securityLevel: securityLevel)
        guard cbluez_l2cap_connect_psm(fd, peer.bytes, type.l2capBdaddrType, spsm) == 0 else {
            throw closing(fd, "opening a channel to \(peer) (\(type)) SPSM 0x\(hex4(spsm))")
        }
        return KernelL2CAPSocket(fd: fd, peer: peer, peerType: type, unit: "SDU")
    }

    /// Listens for channels to `spsm` on the adapter `local` (nil: any), in `mode`.
    public static func listen(spsm: UInt16, mode: KernelChannelMode = .le, receiveMTU: UInt16 = 2048, securityLevel: UInt8? = nil,
                              on local: BluetoothAddress? = nil, type: AddressType = .public, backlog: Int32 = 4) throws -> KernelL2CAPSocket {
        let fd = try channelSocket(spsm: spsm, local: local, type: type, mode: mode, receiveMTU: receiveMTU, securityLevel: securityLevel)
        guard Glibc.listen(fd, backlog) == 0 else {
            throw closing(fd, "listening on SPSM 0x\(hex4(spsm))")
        }
        return KernelL2CAPSocket(fd: fd, peer: nil, peerType: nil, unit: "SDU")
    }

    /// The peer's MTU (the largest SDU a write may carry) and ours, as the kernel
    /// negotiated them (BT_SNDMTU, BT_RCVMTU).
    public func mtus() throws -> (send: Int, receive: Int) {
        var send: UInt16 = 0, receive: UInt16 = 0
        guard cbluez_l2cap_mtus(fd, &send, &receive) == 0 else { throw L2CAPError(operation: "reading the channel's MTUs", errno: errno) }
        return (Int(send), Int(receive))
    }

    /// Receives one SDU (blocking): nil when the channel was closed in order (a
    /// Disconnection Request, or `shutdown`); throws `L2CAPError` with the kernel's
    /// errno when the link went (ECONNRESET, ETIMEDOUT, ...).
    public func receiveSDU(maximum: Int) throws -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: Swift.max(1, maximum))
        let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        if n == 0 { return nil }
        guard n > 0 else { throw L2CAPError(operation: "reading an SDU", errno: errno) }
        return Array(buf.prefix(n))
    }

    /// Shuts both directions down (the kernel closes the channel with a Disconnection
    /// Request) without releasing the descriptor: threads blocked on it wake up.
    public func shutdown() {
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    /// The error of a failed set-up step on `fd` (errno read first), with `fd` closed.
    private static func closing(_ fd: Int32, _ operation: String) -> L2CAPError {
        let e = errno
        Glibc.close(fd)
        return L2CAPError(operation: operation, errno: e)
    }

    private static func socket(_ operation: String) throws -> Int32 {
        let fd = cbluez_l2cap_socket()
        guard fd >= 0 else { throw L2CAPError(operation: operation, errno: errno) }
        return fd
    }

    /// Connects to `peer`'s ATT channel as central; `local` picks the adapter (nil: any).
    /// With `securityLevel` (BT_SECURITY: 2 encrypted, 3 authenticated, 4 Secure
    /// Connections) the kernel's SMP pairs, or encrypts from its stored keys, before the
    /// connect returns; EACCES when it could not.
    public static func connect(to peer: BluetoothAddress, type: AddressType, from local: BluetoothAddress? = nil,
                               securityLevel: UInt8? = nil) throws -> KernelATTSocket {
        let fd = try socket("socket(AF_BLUETOOTH, BTPROTO_L2CAP)")
        let localBytes = local?.bytes ?? [0, 0, 0, 0, 0, 0]
        guard cbluez_l2cap_bind(fd, localBytes, UInt8(CBLUEZ_BDADDR_LE_PUBLIC), UInt16(CBLUEZ_L2CAP_CID_ATT)) == 0 else {
            throw closing(fd, "binding the ATT channel")
        }
        if let securityLevel, cbluez_l2cap_set_security(fd, securityLevel, 0) != 0 { throw closing(fd, "setting the security level (BT_SECURITY)") }
        guard cbluez_l2cap_connect(fd, peer.bytes, type.l2capBdaddrType, UInt16(CBLUEZ_L2CAP_CID_ATT)) == 0 else {
            throw closing(fd, "connecting to \(peer) (\(type)) on the ATT channel")
        }
        return KernelATTSocket(fd: fd, peer: peer, peerType: type)
    }

    /// Listens for centrals on the ATT channel of the adapter with address `local` (nil: any).
    /// With `securityLevel` the kernel, as peripheral, sends a Security Request on each
    /// new link and holds the channel until the central has encrypted it.
    public static func listen(on local: BluetoothAddress? = nil, type: AddressType = .public, backlog: Int32 = 4,
                              securityLevel: UInt8? = nil) throws -> KernelATTSocket {
        let fd = try socket("socket(AF_BLUETOOTH, BTPROTO_L2CAP)")
        guard cbluez_l2cap_bind(fd, local?.bytes ?? [0, 0, 0, 0, 0, 0], type.l2capBdaddrType, UInt16(CBLUEZ_L2CAP_CID_ATT)) == 0 else {
            throw closing(fd, "binding the ATT channel")
        }
        if let securityLevel, cbluez_l2cap_set_security(fd, securityLevel, 0) != 0 { throw closing(fd, "setting the security level (BT_SECURITY)") }
        guard Glibc.listen(fd, backlog) == 0 else { throw closing(fd, "listening on the ATT channel") }
        return KernelATTSocket(fd: fd, peer: nil, peerType: nil)
    }

    /// The link's security as the kernel sees it (BT_SECURITY on a connected socket):
    /// level 1 unencrypted, 2 encrypted, 3 authenticated, 4 Secure Connections.
    public func security() throws -> (level: UInt8, keySize: UInt8) {
        var level: UInt8 = 0, size: UInt8 = 0
        guard cbluez_l2cap_security(fd, &level, &size) == 0 else { throw L2CAPError(operation: "reading the link's security (BT_SECURITY)", errno: errno) }
        return (level, size)
    }

    /// Accepts one central (blocking).
    public func accept() throws -> KernelL2CAPSocket {
        var addr = [UInt8](repeating: 0, count: 6)
        var type: UInt8 = 0
        let c = cbluez_l2cap_accept(fd, &addr, &type)
        guard c >= 0 else { throw L2CAPError(operation: unit == "SDU" ? "accepting a channel" : "accepting on the ATT channel", errno: errno) }
        let t: AddressType = type == UInt8(CBLUEZ_BDADDR_LE_RANDOM) ? .random : .public
        return KernelL2CAPSocket(fd: c, peer: try? BluetoothAddress(wireBytes: addr), peerType: t, unit: unit)
    }

    /// Sends one PDU (or SDU); blocks while the kernel waits for the peer's credits.
    public func send(_ pdu: [UInt8]) throws {
        let n = pdu.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard n == pdu.count else { throw L2CAPError(operation: "writing an \(unit)", errno: n < 0 ? errno : EMSGSIZE) }
    }

    /// Receives one PDU (blocking); nil when the link is gone.
    public func receive(maximum: Int = 65_535) throws -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: maximum)
        let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        if n == 0 { return nil }
        guard n > 0 else {
            if errno == ENOTCONN || errno == ECONNRESET { return nil }
            throw L2CAPError(operation: "reading an ATT PDU", errno: errno)
        }
        return Array(buf.prefix(n))
    }

    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }

    deinit { close() }
}

/// A failed L2CAP socket operation, explained.
public struct L2CAPError: Error, Equatable, Sendable, CustomStringConvertible {
    public var operation: String
    public var errno: Int32
    public var description: String

    public init(operation: String, errno e: Int32) {
        self.operation = operation
        self.errno = e
        let base = "\(operation) failed: \(errnoString(e))"
        switch e {
        case EAFNOSUPPORT, EPROTONOSUPPORT:
            description = BlueZError(operation: operation, errno: EAFNOSUPPORT, adapters: { [] }).description
        case EADDRINUSE:
            description = "\(base): another ATT server already listens on this adapter (usually bluetoothd's GATT server): "
                + "stop bluetoothd (`sudo systemctl stop bluetooth`) or serve from another adapter"
        case ECONNREFUSED where operation.contains("SPSM"):
            description = "\(base): the peer refused the channel (no server on that SPSM, or no resources for another channel)"
        case EHOSTDOWN, EHOSTUNREACH, ETIMEDOUT, ECONNREFUSED:
            description = "\(base): the peer did not answer; check it is advertising as connectable, in range, and that the address type (public/random) is right"
        case EPERM, EACCES:
            description = "\(base): needs CAP_NET_RAW / CAP_NET_ADMIN for this address or security level; run as root or `sudo setcap 'cap_net_admin,cap_net_raw+eip' \"$(command -v btctl)\"`"
        default:
            description = base
        }
    }
}
