// ATT opcodes (Core Specification v5.4, Vol 3, Part F, §3.3 and §3.4).

import HCI

/// An ATT opcode. Bit 6 is the Command Flag, bit 7 the Authentication Signature Flag.
public struct ATTOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let errorResponse = ATTOpcode(rawValue: 0x01)
    public static let exchangeMTURequest = ATTOpcode(rawValue: 0x02)
    public static let exchangeMTUResponse = ATTOpcode(rawValue: 0x03)
    public static let findInformationRequest = ATTOpcode(rawValue: 0x04)
    public static let findInformationResponse = ATTOpcode(rawValue: 0x05)
    public static let findByTypeValueRequest = ATTOpcode(rawValue: 0x06)
    public static let findByTypeValueResponse = ATTOpcode(rawValue: 0x07)
    public static let readByTypeRequest = ATTOpcode(rawValue: 0x08)
    public static let readByTypeResponse = ATTOpcode(rawValue: 0x09)
    public static let readRequest = ATTOpcode(rawValue: 0x0A)
    public static let readResponse = ATTOpcode(rawValue: 0x0B)
    public static let readBlobRequest = ATTOpcode(rawValue: 0x0C)
    public static let readBlobResponse = ATTOpcode(rawValue: 0x0D)
    public static let readMultipleRequest = ATTOpcode(rawValue: 0x0E)
    public static let readMultipleResponse = ATTOpcode(rawValue: 0x0F)
    public static let readByGroupTypeRequest = ATTOpcode(rawValue: 0x10)
    public static let readByGroupTypeResponse = ATTOpcode(rawValue: 0x11)
    public static let writeRequest = ATTOpcode(rawValue: 0x12)
    public static let writeResponse = ATTOpcode(rawValue: 0x13)
    public static let prepareWriteRequest = ATTOpcode(rawValue: 0x16)
    public static let prepareWriteResponse = ATTOpcode(rawValue: 0x17)
    public static let executeWriteRequest = ATTOpcode(rawValue: 0x18)
    public static let executeWriteResponse = ATTOpcode(rawValue: 0x19)
    public static let handleValueNotification = ATTOpcode(rawValue: 0x1B)
    public static let handleValueIndication = ATTOpcode(rawValue: 0x1D)
    public static let handleValueConfirmation = ATTOpcode(rawValue: 0x1E)
    public static let readMultipleVariableRequest = ATTOpcode(rawValue: 0x20)
    public static let readMultipleVariableResponse = ATTOpcode(rawValue: 0x21)
    public static let multipleHandleValueNotification = ATTOpcode(rawValue: 0x23)
    public static let writeCommand = ATTOpcode(rawValue: 0x52)
    public static let signedWriteCommand = ATTOpcode(rawValue: 0xD2)

    public var isCommand: Bool { rawValue & 0x40 != 0 }

    /// How the PDU takes part in the protocol (§3.3): requests and indications expect an answer.
    public enum Kind: Sendable { case request, response, command, notification, indication, confirmation, unknown }

    public var kind: Kind {
        switch rawValue {
        case 0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20: return .request
        case 0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x21: return .response
        case 0x52, 0xD2: return .command
        case 0x1B, 0x23: return .notification
        case 0x1D: return .indication
        case 0x1E: return .confirmation
        default: return isCommand ? .command : .unknown
        }
    }

    public var description: String {
        switch rawValue {
        case 0x01: return "Error Response"
        case 0x02: return "Exchange MTU Request"
        case 0x03: return "Exchange MTU Response"
        case 0x04: return "Find Information Request"
        case 0x05: return "Find Information Response"
        case 0x06: return "Find By Type Value Request"
        case 0x07: return "Find By Type Value Response"
        case 0x08: return "Read By Type Request"
        case 0x09: return "Read By Type Response"
        case 0x0A: return "Read Request"
        case 0x0B: return "Read Response"
        case 0x0C: return "Read Blob Request"
        case 0x0D: return "Read Blob Response"
        case 0x0E: return "Read Multiple Request"
        case 0x0F: return "Read Multiple Response"
        case 0x10: return "Read By Group Type Request"
        case 0x11: return "Read By Group Type Response"
        case 0x12: return "Write Request"
        case 0x13: return "Write Response"
        case 0x16: return "Prepare Write Request"
        case 0x17: return "Prepare Write Response"
        case 0x18: return "Execute Write Request"
        case 0x19: return "Execute Write Response"
        case 0x1B: return "Handle Value Notification"
        case 0x1D: return "Handle Value Indication"
        case 0x1E: return "Handle Value Confirmation"
        case 0x20: return "Read Multiple Variable Request"
        case 0x21: return "Read Multiple Variable Response"
        case 0x23: return "Multiple Handle Value Notification"
        case 0x52: return "Write Command"
        case 0xD2: return "Signed Write Command"
        default: return "unknown ATT opcode 0x" + String(rawValue, radix: 16)
        }
    }
}
