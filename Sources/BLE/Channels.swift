// L2CAP connection-oriented channels through the facade, the way CoreBluetooth offers
// them (`publishL2CAPChannel`, `openL2CAPChannel`): publish an SPSM and take the
// channels peers open to it; open a channel to a peer's SPSM on a connection. Each
// channel is an `L2CAPChannel`: SDUs as an AsyncSequence that gives the peer credits
// back as you consume them, `send` that waits for the peer's credits, `close`.
// A link's disconnection ends its channels with the controller's reason.

@_exported import class L2CAP.L2CAPChannel
@_exported import struct L2CAP.CreditBasedParameters
@_exported import struct L2CAP.CreditBasedChannelInfo
@_exported import struct L2CAP.CreditBasedConnectionResult
@_exported import enum L2CAP.L2CAPChannelError
@_exported import enum L2CAP.ChannelCloseReason

extension BluetoothHost {
    /// Accepts LE credit-based channels to `spsm` (0x0080...0x00FF for applications;
    /// 0x0001...0x007F are SIG-assigned) on every connection, now and later, offering
    /// `parameters` (our MTU, MPS, initial credits). Channels not yet taken wait in a
    /// buffer of `backlog`; beyond that a new channel is closed at once and counted in
    /// `dropped`. Publishing the SPSM again replaces the previous stream (which ends).
    public func publishChannel(spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters(), backlog: Int = 16) async -> BufferedStream<L2CAPChannel> {
        await l2cap.listen(spsm: spsm, parameters: parameters, backlog: backlog)
    }

    /// Stops accepting channels to `spsm`; open channels stay open.
    public func unpublishChannel(spsm: UInt16) async {
        await l2cap.stopListening(spsm: spsm)
    }

    /// Opens an LE credit-based channel to the peer's `spsm` on `connection` (either
    /// role). Throws `L2CAPChannelError`: `.refused` with the peer's result (SPSM not
    /// supported, insufficient authentication, ...), `.timedOut` after 30 s without an
    /// answer, `.linkClosed` when the link is not up or goes down meanwhile.
    public func openChannel(to connection: Connection, spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> L2CAPChannel {
        try await l2cap.connectChannel(spsm: spsm, handle: connection.handle, parameters: parameters)
    }
}

extension RemotePeripheral {
    /// Opens an LE credit-based channel to this peripheral's `spsm`
    /// (`BluetoothHost.openChannel(to:spsm:parameters:)`).
    public func openChannel(spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> L2CAPChannel {
        try await host.openChannel(to: connection, spsm: spsm, parameters: parameters)
    }
}
