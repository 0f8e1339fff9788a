// The virtual controller's data length (Core Specification v5.4, Vol 4, Part E,
// §7.8.33–§7.8.35, §7.8.46; Vol 6, Part B, §4.5.10, §5.1.9): each way of a link on its
// own. A side sends PDUs of at most what its host asked for (the suggested default
// when the link came up, LE Set Data Length later), and receives up to 251 octets, so
// a way's length is its sender's choice. A link whose sides start above 27 octets runs
// the data length update at once, as controllers do; both hosts hear LE Data Length
// Change whenever a way's length changes, each from its own side. Times are LE 1M's:
// (octets + 14) × 8 µs. Rootcanal 1.10 checks the commands' ranges the same way but
// never changes a link's length.

import HCI

/// The octets a side sends per PDU, as the spec bounds them: 27 to 251, and no more
/// than fits in `time` on LE 1M.
struct VirtualDataLength: Equatable {
    var octets: UInt16
    static let initial = VirtualDataLength(octets: 27)
    static let maximum = VirtualDataLength(octets: 251)

    init(octets: UInt16) { self.octets = octets }
    /// What a side sends when its host asks for `octets` in at most `time` µs.
    init(octets: UInt16, time: UInt16) {
        let fits = Swift.max(Int(time) / 8 - 14, 27)
        self.octets = UInt16(Swift.min(Int(octets), fits, 251))
    }
    var time: UInt16 { (octets + 14) * 8 }
}

extension VirtualController {
    func handleDataLength(_ op: HCIOpcode, _ p: [UInt8]) async throws {
        switch op {
        case .leSetDataLength:
            let c = try LESetDataLength.decode(p)
            guard let radio, await radio.hasLink(self, handle: c.connectionHandle) else { return complete(op, status: .unknownConnectionIdentifier) }
            guard LEDataLengthRange.octets.contains(c.txOctets), LEDataLengthRange.time.contains(c.txTime) else {
                return complete(op, status: .invalidCommandParameters)
            }
            complete(op, HCIConnectionHandleReturn(connectionHandle: c.connectionHandle))
            await radio.setDataLength(self, handle: c.connectionHandle, VirtualDataLength(octets: c.txOctets, time: c.txTime))
        case .leReadSuggestedDefaultDataLength:
            complete(op, LEReadSuggestedDefaultDataLength.ReturnParameters(suggestedMaxTxOctets: suggestedDataLength.octets,
                                                                          suggestedMaxTxTime: suggestedDataLength.time))
            // (As written, as Rootcanal answers; a link's sender sends what fits.)
        case .leWriteSuggestedDefaultDataLength:
            let c = try LEWriteSuggestedDefaultDataLength.decode(p)
            guard LEDataLengthRange.octets.contains(c.suggestedMaxTxOctets), LEDataLengthRange.time.contains(c.suggestedMaxTxTime) else {
                return complete(op, status: .invalidCommandParameters)
            }
            suggestedDataLength = (c.suggestedMaxTxOctets, c.suggestedMaxTxTime)
            complete(op)
        case .leReadMaximumDataLength:
            let m = VirtualDataLength.maximum
            complete(op, LEReadMaximumDataLength.ReturnParameters(supportedMaxTxOctets: m.octets, supportedMaxTxTime: m.time,
                                                                 supportedMaxRxOctets: m.octets, supportedMaxRxTime: m.time))
        default:
            complete(op, status: .unknownCommand)
        }
    }

    /// LE Data Length Change for link `handle`, when the host unmasked it (LE event mask bit 6).
    func dataLengthChanged(handle: UInt16, tx: VirtualDataLength, rx: VirtualDataLength) {
        guard leEventMask & 1 << 6 != 0 else { return }
        emit(.le(.dataLengthChange(LEDataLengthChange(connectionHandle: handle, maxTxOctets: tx.octets, maxTxTime: tx.time,
                                                      maxRxOctets: rx.octets, maxRxTime: rx.time))))
    }
}

extension VirtualRadio {
    /// On the loop: the way from `sender` of its link `handle` now carries `length`; both ends hear
    /// LE Data Length Change when that changed the link.
    func setDataLength(_ sender: VirtualController, handle: UInt16, _ length: VirtualDataLength) {
        guard let i = linkIndex(sender, handle) else { return }
        let before = links[i]
        if links[i].central === sender { links[i].centralTx = length } else { links[i].peripheralTx = length }
        if links[i].centralTx != before.centralTx || links[i].peripheralTx != before.peripheralTx { dataLengthChanged(links[i]) }
    }

    /// Both ends of `l` hear its data length, each from its own side.
    func dataLengthChanged(_ l: Link) {
        l.central.onLoop { $0.dataLengthChanged(handle: l.centralHandle, tx: l.centralTx, rx: l.peripheralTx) }
        l.peripheral.onLoop { $0.dataLengthChanged(handle: l.peripheralHandle, tx: l.peripheralTx, rx: l.centralTx) }
    }
}
