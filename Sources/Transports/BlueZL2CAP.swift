// The kernel's L2CAP socket on the ATT fixed channel (AF_BLUETOOTH, BTPROTO_L2CAP,
// SOCK_SEQPACKET, CID 0x0004) through CBlueZ: the kernel does L2CAP and we exchange
// whole ATT PDUs. Connecting makes the kernel create the LE link as central;
// listening accepts centrals that connect to an advertising adapter.
// The ATT bearer over it (issue 3) is built on this type.

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

public final class KernelATTSocket: @unchecked Sendable {
    /// The descriptor; SOCK_SEQPACKET: one read is one PDU, one write is one PDU.
    public let fd: Int32
    public let peer: BluetoothAddress?
    public let peerType: AddressType?
    private var closed = false

    private init(fd: Int32, peer: BluetoothAddress?, peerType: AddressType?) {
        self.fd = fd
        self.peer = peer
        self.peerType = peerType
    }

    private static func socket(_ operation: String) throws -> Int32 {
        let fd = cbluez_l2cap_socket()
        guard fd >= 0 else { throw L2CAPError(operation: operation, errno: errno) }
        return fd
    }

    /// Connects to `peer`'s ATT channel as central; `local` picks the adapter (nil: any).
    public static func connect(to peer: BluetoothAddress, type: AddressType, from local: BluetoothAddress? = nil) throws -> KernelATTSocket {
        let fd = try socket("socket(AF_BLUETOOTH, BTPROTO_L2CAP)")
        let localBytes = local?.bytes ?? [0, 0, 0, 0, 0, 0]
        guard cbluez_l2cap_bind(fd, localBytes, UInt8(CBLUEZ_BDADDR_LE_PUBLIC), UInt16(CBLUEZ_L2CAP_CID_ATT)) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw L2CAPError(operation: "binding the ATT channel", errno: e)
        }
        guard cbluez_l2cap_connect(fd, peer.bytes, type.l2capBdaddrType, UInt16(CBLUEZ_L2CAP_CID_ATT)) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw L2CAPError(operation: "connecting to \(peer) (\(type)) on the ATT channel", errno: e)
        }
        return KernelATTSocket(fd: fd, peer: peer, peerType: type)
    }

    /// Listens for centrals on the ATT channel of the adapter with address `local` (nil: any).
    public static func listen(on local: BluetoothAddress? = nil, type: AddressType = .public, backlog: Int32 = 4) throws -> KernelATTSocket {
        let fd = try socket("socket(AF_BLUETOOTH, BTPROTO_L2CAP)")
        guard cbluez_l2cap_bind(fd, local?.bytes ?? [0, 0, 0, 0, 0, 0], type.l2capBdaddrType, UInt16(CBLUEZ_L2CAP_CID_ATT)) == 0,
              Glibc.listen(fd, backlog) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw L2CAPError(operation: "listening on the ATT channel", errno: e)
        }
        return KernelATTSocket(fd: fd, peer: nil, peerType: nil)
    }

    /// Accepts one central (blocking).
    public func accept() throws -> KernelATTSocket {
        var addr = [UInt8](repeating: 0, count: 6)
        var type: UInt8 = 0
        let c = cbluez_l2cap_accept(fd, &addr, &type)
        guard c >= 0 else { throw L2CAPError(operation: "accepting on the ATT channel", errno: errno) }
        let t: AddressType = type == UInt8(CBLUEZ_BDADDR_LE_RANDOM) ? .random : .public
        return KernelATTSocket(fd: c, peer: try? BluetoothAddress(wireBytes: addr), peerType: t)
    }

    /// Sends one PDU.
    public func send(_ pdu: [UInt8]) throws {
        let n = pdu.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard n == pdu.count else { throw L2CAPError(operation: "writing an ATT PDU", errno: n < 0 ? errno : EMSGSIZE) }
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
        case EHOSTDOWN, EHOSTUNREACH, ETIMEDOUT, ECONNREFUSED:
            description = "\(base): the peer did not answer; check it is advertising as connectable, in range, and that the address type (public/random) is right"
        case EPERM, EACCES:
            description = "\(base): needs CAP_NET_RAW / CAP_NET_ADMIN for this address or security level; run as root or `sudo setcap 'cap_net_admin,cap_net_raw+eip' \"$(command -v btctl)\"`"
        default:
            description = base
        }
    }
}
