// ATT over the kernel's L2CAP socket (AF_BLUETOOTH, BTPROTO_L2CAP, SOCK_SEQPACKET,
// CID 0x0004): the kernel does HCI and L2CAP, we exchange whole ATT PDUs. The same
// ATTBearer, GATT client and GATT server run over it as over our user-space L2CAP.
// One reader thread per socket blocks in read(2) and hands each PDU to the channel's
// event loop; close() shuts the socket down, which wakes it. Writes are one send(2)
// per PDU, on the loop (a SOCK_SEQPACKET write of one PDU does not block for long).

import ATT
import Foundation
import HCI
import NIOCore
import NIOPosix
import Synchronization
import Transports
#if canImport(Glibc)
import Glibc
#endif

public final class KernelATTChannel: ATTChannel, Sendable {
    public let socket: KernelATTSocket
    /// The loop the bearer over this socket runs on.
    public let loop: any EventLoop
    private let inbound: AsyncStream<[UInt8]>
    private let reason = Reason()

    final class Reason: Sendable {
        let value = Mutex<String?>(nil)
        func set(_ r: String) { value.withLock { $0 = $0 ?? r } }
        var current: String? { value.withLock { $0 } }
    }

    /// Takes over a connected socket (from `KernelATTSocket.connect` or `accept`);
    /// `loop` by default one of NIO's shared loops (pass a GATT server's to share it).
    public init(socket: KernelATTSocket, loop: (any EventLoop)? = nil) {
        self.socket = socket
        self.loop = loop ?? MultiThreadedEventLoopGroup.singleton.next()
        let (stream, continuation) = AsyncStream<[UInt8]>.makeStream()
        self.inbound = stream
        let reason = self.reason
        let thread = Thread {
            while true {
                do {
                    guard let pdu = try socket.receive() else {
                        reason.set("the kernel closed the ATT channel")
                        break
                    }
                    continuation.yield(pdu)
                } catch {
                    reason.set("\(error)")
                    break
                }
            }
            continuation.finish()
        }
        thread.name = "att-kernel"
        thread.start()
    }

    public func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void) {
        let inbound = self.inbound, loop = self.loop
        // One task forwards in order; each PDU is handled on the loop.
        Task {
            for await pdu in inbound { loop.execute { deliver(.frame(pdu)) } }
            loop.execute { deliver(.closed) }
        }
    }

    public func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool {
        do { try socket.send(pdu) } catch {
            reason.set("\(error)")
            return false
        }
        done?(true)
        return true
    }

    public var closeReason: String { reason.current ?? "closed" }

    public func close() {
        reason.set("closed by the host")
        socket.close()
    }
}

extension KernelATTChannel {
    /// Runs a blocking socket call on its own thread (never on the cooperative pool,
    /// which a one-CPU machine would stall).
    static func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            let t = Thread { c.resume(with: Result { try body() }) }
            t.name = name
            t.start()
        }
    }

    /// Connects as central to `peer`'s ATT channel; the kernel creates the LE link.
    public static func connect(to peer: BluetoothAddress, type: AddressType, from local: BluetoothAddress? = nil,
                               loop: (any EventLoop)? = nil) async throws -> KernelATTChannel {
        KernelATTChannel(socket: try await onThread("att-connect") { try KernelATTSocket.connect(to: peer, type: type, from: local) }, loop: loop)
    }

    /// Waits for a central to connect to `listener`.
    public static func accept(on listener: KernelATTSocket, loop: (any EventLoop)? = nil) async throws -> KernelATTChannel {
        KernelATTChannel(socket: try await onThread("att-accept") { try listener.accept() }, loop: loop)
    }
}
