// The virtual controller's Filter Accept List (Core Specification v5.4, Vol 4, Part E,
// §7.8.14–§7.8.17): 16 entries, as Rootcanal's. A connection attempt through it
// (Initiator_Filter_Policy 1), advertising that answers it alone
// (Advertising_Filter_Policy 1 to 3) or scanning through it (Scanning_Filter_Policy 1
// or 3) holds it: the commands that would change it are
// then refused with Command Disallowed, as Rootcanal refuses them
// (VirtualAgainstRootcanalTests).

import HCI

extension VirtualController {
    /// An entry of the Filter Accept List: Address_Type (0 public, 1 random) and address.
    struct FilterAcceptListEntry: Equatable {
        var type: UInt8
        var address: BluetoothAddress
    }
    /// Entries the Filter Accept List holds (Rootcanal's default too).
    static let filterAcceptListSize = 16

    func handleFilterAcceptList(_ op: HCIOpcode, _ p: [UInt8]) throws {
        switch op {
        case .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList, .leRemoveDeviceFromFilterAcceptList:
            // §7.8.15–§7.8.17: not while advertising, scanning or a connection attempt uses the list.
            guard pendingConnection == nil || !initiatingWithList, !(isAdvertising && legacyFilterPolicy != 0), !sets.usesAcceptList,
                  !(scanning && scanningFilterPolicy & 1 != 0)
            else { return complete(op, status: .commandDisallowed) }
            if op == .leClearFilterAcceptList {
                filterAcceptList.removeAll()
            } else if op == .leAddDeviceToFilterAcceptList {
                let c = try LEAddDeviceToFilterAcceptList.decode(p)
                guard filterAcceptList.count < Self.filterAcceptListSize else { return complete(op, status: .memoryCapacityExceeded) }
                filterAcceptList.append(FilterAcceptListEntry(type: c.addressType.rawValue, address: c.address))
            } else {
                let c = try LERemoveDeviceFromFilterAcceptList.decode(p)
                // An entry that is not there: Success, as Rootcanal answers.
                filterAcceptList.removeAll { $0 == FilterAcceptListEntry(type: c.addressType.rawValue, address: c.address) }
            }
            complete(op)
        case .leReadFilterAcceptListSize:
            complete(op, HCIOctetReturn(value: UInt8(Self.filterAcceptListSize)))
        default:
            complete(op, status: .unknownCommand)
        }
    }
}
