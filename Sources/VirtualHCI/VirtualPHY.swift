// The virtual controller's PHYs (Core Specification v5.4, Vol 4, Part E, §7.8.47–
// §7.8.49; Vol 6, Part B, §5.1.10): LE 1M, LE 2M and LE Coded, each way of a link on
// its own (a link made through extended advertising starts on its secondary PHY).
// A host's LE Set PHY runs the PHY update procedure as Rootcanal models it: the
// peer's controller answers with its default PHYs (LE Set Default PHY), each way takes
// the fastest PHY both allow (else stays), the initiator's host always hears LE PHY
// Update Complete and the peer's host only of a change.

import HCI

extension VirtualController {
    /// The PHYs this controller has: LE 1M, LE 2M and LE Coded (bits 0 to 2).
    static let supportedPHYs: UInt8 = 0x07

    /// TX_PHYs and RX_PHYs as LE Set Default PHY and LE Set PHY take them: All_PHYs
    /// bit 0 (or 1) says "no preference" for TX (or RX). A failure carries the status to refuse with.
    static func preferences(all: UInt8, tx: UInt8, rx: UInt8) -> Result<(tx: UInt8, rx: UInt8), HCIStatus> {
        let tx = all & 0x01 != 0 ? supportedPHYs : tx, rx = all & 0x02 != 0 ? supportedPHYs : rx
        guard tx != 0, rx != 0 else { return .failure(.invalidCommandParameters) }
        guard (tx | rx) & ~supportedPHYs == 0 else { return .failure(.unsupportedFeatureOrParameterValue) }
        return .success((tx, rx))
    }

    func handlePHY(_ op: HCIOpcode, _ p: [UInt8]) async throws {
        switch op {
        case .leSetDefaultPHY:
            let c = try LESetDefaultPHY.decode(p)
            switch Self.preferences(all: c.allPHYs, tx: c.txPHYs, rx: c.rxPHYs) {
            case let .success(d):
                defaultPHYs = d
                complete(op)
            case let .failure(e):
                complete(op, status: e)
            }
        case .leSetPHY:
            let c = try LESetPHY.decode(p)
            guard let radio, await radio.hasLink(self, handle: c.connectionHandle) else { return status(op, .unknownConnectionIdentifier) }
            switch Self.preferences(all: c.allPHYs, tx: c.txPHYs, rx: c.rxPHYs) {
            case let .success(want):
                status(op)
                await radio.updatePHY(self, handle: c.connectionHandle, tx: want.tx, rx: want.rx)
            case let .failure(e):
                status(op, e)
            }
        case .leReadPHY:
            let h = try LEReadPHY.decode(p).connectionHandle
            guard let radio, let phys = await radio.phys(self, handle: h) else { return complete(op, status: .unknownConnectionIdentifier) }
            complete(op, LEReadPHY.ReturnParameters(connectionHandle: h, txPHY: phys.tx, rxPHY: phys.rx))
        default:
            complete(op, status: .unknownCommand)
        }
    }

    /// LE PHY Update Complete for link `handle`, when the host unmasked it (LE event mask bit 11).
    func phyUpdated(handle: UInt16, tx: UInt8, rx: UInt8) {
        if leEventMask & 1 << 11 != 0 { emit(.le(.phyUpdateComplete(LEPHYUpdateComplete(connectionHandle: handle, txPHY: tx, rxPHY: rx)))) }
    }
}

extension VirtualRadio {
    func hasLink(_ sender: VirtualController, handle: UInt16) -> Bool { linkIndex(sender, handle) != nil }

    /// The PHYs `sender` transmits and receives on over its link `handle`.
    func phys(_ sender: VirtualController, handle: UInt16) -> (tx: UInt8, rx: UInt8)? {
        guard let i = linkIndex(sender, handle) else { return nil }
        let l = links[i]
        return l.central === sender ? (l.phyCentralToPeripheral, l.phyPeripheralToCentral) : (l.phyPeripheralToCentral, l.phyCentralToPeripheral)
    }

    /// The PHY update procedure `sender` started on its link `handle`, preferring `tx`
    /// and `rx` (PHY bits): what `sender` sends, the peer receives, so each way takes
    /// the fastest PHY in `sender`'s preference and the peer's default for the other
    /// direction, and stays when they share none.
    func updatePHY(_ sender: VirtualController, handle: UInt16, tx: UInt8, rx: UInt8) async {
        guard let first = linkIndex(sender, handle) else { return }
        let peer = links[first].central === sender ? links[first].peripheral : links[first].central
        let peerDefaults = await peer.defaultPHYs
        // Looked up again: the link may have ended meanwhile.
        guard let i = linkIndex(sender, handle) else { return }
        let l = links[i]
        let fromCentral = l.central === sender
        let peerHandle = fromCentral ? l.peripheralHandle : l.centralHandle
        // The fastest: LE 2M, then LE 1M, then LE Coded.
        func select(_ phys: UInt8, _ current: UInt8) -> UInt8 { phys & 0x02 != 0 ? 2 : (phys & 0x01 != 0 ? 1 : (phys & 0x04 != 0 ? 3 : current)) }
        let current = fromCentral ? (l.phyCentralToPeripheral, l.phyPeripheralToCentral) : (l.phyPeripheralToCentral, l.phyCentralToPeripheral)
        let sends = select(tx & peerDefaults.rx, current.0), receives = select(rx & peerDefaults.tx, current.1)
        let changed = (sends, receives) != current
        if fromCentral {
            (links[i].phyCentralToPeripheral, links[i].phyPeripheralToCentral) = (sends, receives)
        } else {
            (links[i].phyPeripheralToCentral, links[i].phyCentralToPeripheral) = (sends, receives)
        }
        await sender.phyUpdated(handle: handle, tx: sends, rx: receives)
        if changed { await peer.phyUpdated(handle: peerHandle, tx: receives, rx: sends) }
    }
}
