// L2CAP connection-oriented channels through the facade, the way CoreBluetooth offers
// them (`publishL2CAPChannel`, `openL2CAPChannel`): publish an SPSM (optionally with
// the security a link needs) and take the channels peers open to it; open a channel,
// or up to five at once in enhanced mode, to a peer's SPSM on a connection. Each
// channel is an `L2CAPChannel`: SDUs as an AsyncSequence that gives the peer credits
// back as you consume them, `send` that waits for the peer's credits, `close`.
// A link's disconnection ends its channels with the controller's reason.

@_exported import class L2CAP.L2CAPChannel
@_exported import struct L2CAP.CreditBasedParameters
@_exported import struct L2CAP.CreditBasedChannelInfo
@_exported import struct L2CAP.CreditBasedConnectionResult
@_exported import enum L2CAP.L2CAPChannelError
@_exported import enum L2CAP.ChannelCloseReason
@_exported import struct L2CAP.ChannelSecurity
@_exported import struct L2CAP.CreditBasedReconfigureResult

extension BluetoothHost {
    /// Accepts credit-based channels to `spsm` (0x0080...0x00FF for applications;
    /// 0x0001...0x007F are SIG-assigned) on every connection, now and later, in LE and
    /// enhanced mode, offering `parameters` (our MTU, MPS, initial credits). A link
    /// that does not meet `security` is refused ("insufficient authentication",
    /// "encryption key size too short"): the peer pairs or encrypts and asks again.
    /// Channels not yet taken wait in a buffer of `backlog`; beyond that a new channel
    /// is closed at once and counted in `dropped`. Publishing the SPSM again replaces
    /// the previous stream (which ends). Letting go of the stream (the consuming task
    /// cancelled, the stream dropped) unpublishes the SPSM: later requests are refused
    /// with "SPSM not supported".
    public func publishChannel(spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters(), security: ChannelSecurity = .none,
                               backlog: Int = 16) async -> BufferedStream<L2CAPChannel> {
        await l2cap.listen(spsm: spsm, parameters: parameters, security: security, backlog: backlog)
    }

    /// Stops accepting channels to `spsm`; open channels stay open.
    public func unpublishChannel(spsm: UInt16) async {
        await l2cap.stopListening(spsm: spsm)
    }

    /// Opens an LE credit-based channel to the peer's `spsm` on `connection` (either
    /// role). Throws `L2CAPChannelError`: `.refused` with the peer's result (SPSM not
    /// supported, insufficient authentication, ...), `.timedOut` after 30 s without an
    /// answer, `.linkClosed` when the link is not up or goes down meanwhile.
    /// When the peer refuses for the link's security and the host pairs on demand
    /// (`SecurityOptions.pairOnDemand`), the link is encrypted or paired to the level
    /// the refusal asks for and the request is made once more.
    public func openChannel(to connection: Connection, spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> L2CAPChannel {
        try await securedOnDemand(connection) { try await l2cap.connectChannel(spsm: spsm, handle: connection.handle, parameters: parameters) }
    }

    /// Opens `count` (1...5) channels to the peer's `spsm` with one request in enhanced
    /// credit-based mode (MTU and MPS at least 64); each channel's MTU and MPS can later
    /// grow with `L2CAPChannel.reconfigure`. Returns the channels the peer accepted (it
    /// may refuse some for want of resources); throws `.refused` when it accepted none,
    /// otherwise as `openChannel`.
    public func openChannels(to connection: Connection, spsm: UInt16, count: Int, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> [L2CAPChannel] {
        try await securedOnDemand(connection) {
            try await l2cap.connectChannels(spsm: spsm, count: count, handle: connection.handle, parameters: parameters)
        }
    }

    /// Runs a channel request; a refusal for the link's security is met (when the host
    /// pairs on demand) by encrypting or pairing once, then the request runs again.
    private func securedOnDemand<T: Sendable>(_ connection: Connection, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let L2CAPChannelError.refused(result)
            where securityOptions.pairOnDemand && [.insufficientAuthentication, .insufficientEncryption, .encryptionKeySizeTooShort].contains(result) {
            let current = await security(of: connection)
            // A short key stays short when paired again; refused while encrypted
            // otherwise, only an authenticated (MITM-protected) key can help.
            guard !(current.encrypted && result == .encryptionKeySizeTooShort) else { throw L2CAPChannelError.refused(result) }
            let level: SecurityLevel = current.encrypted ? .authenticated : .encrypted
            guard current.level < level else { throw L2CAPChannelError.refused(result) }
            _ = try await secure(connection, level: level)
            return try await body()
        }
    }
}

extension RemotePeripheral {
    /// Opens an LE credit-based channel to this peripheral's `spsm`
    /// (`BluetoothHost.openChannel(to:spsm:parameters:)`).
    public func openChannel(spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> L2CAPChannel {
        try await host.openChannel(to: connection, spsm: spsm, parameters: parameters)
    }

    /// Opens up to five channels to this peripheral's `spsm` at once, in enhanced mode
    /// (`BluetoothHost.openChannels(to:spsm:count:parameters:)`).
    public func openChannels(spsm: UInt16, count: Int, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> [L2CAPChannel] {
        try await host.openChannels(to: connection, spsm: spsm, count: count, parameters: parameters)
    }
}
