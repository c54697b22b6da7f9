; Lookahead Chat: Windows installer (NSIS 3, Unicode, MUI2).
;
; Per-user install without administrator rights into %LOCALAPPDATA%\Programs\Lookahead Chat, a
; Start-menu shortcut, an optional desktop shortcut, and an uninstaller that asks before it deletes
; the user's downloaded models, chats and settings.
;
; Compile (from the repository root, after PyInstaller built dist\lookahead-chat):
;   makensis /DVERSION=0.1.0 /DVARIANT=cpu /DPAYLOAD=dist\lookahead-chat /DOUTFILE=dist\lookahead-chat-0.1.0-windows-x64-cpu-setup.exe packaging\windows\installer.nsi
; PAYLOAD is the PyInstaller onedir bundle: lookahead-chat.exe (windowed), lookahead-chat-cli.exe
; (console) and _internal\.  Relative paths are resolved against this script's folder, so pass
; absolute paths (the Makefile and the CI workflow do).
;
; Size limit: an NSIS installer holds at most 2 GB of compressed data.  The CPU build fits easily;
; see packaging/INSTALL.md (Sizes) for the CUDA build.

Unicode true
ManifestDPIAware true
SetCompressor /SOLID lzma
SetCompressorDictSize 64
RequestExecutionLevel user

!ifndef VERSION
  !define VERSION "0.1.0"
!endif
!ifndef VARIANT
  !define VARIANT "cpu"
!endif
!ifndef PAYLOAD
  !error "Pass /DPAYLOAD=<folder of the PyInstaller bundle>"
!endif
!ifndef OUTFILE
  !define OUTFILE "lookahead-chat-${VERSION}-windows-x64-${VARIANT}-setup.exe"
!endif

!define APPNAME "Lookahead Chat"
!define EXE "lookahead-chat.exe"
!define UNINSTKEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\LookaheadChat"
; Where the app keeps per-user files (platformdirs with appauthor=False): settings and chats in
; %LOCALAPPDATA%\lookahead-chat, downloaded and converted models in ...\lookahead-chat\Cache.
!define USERDATA "$LOCALAPPDATA\lookahead-chat"

Name "${APPNAME}"
OutFile "${OUTFILE}"
InstallDir "$LOCALAPPDATA\Programs\${APPNAME}"
InstallDirRegKey HKCU "${UNINSTKEY}" "InstallLocation"
BrandingText "${APPNAME} ${VERSION} (${VARIANT})"

VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APPNAME}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APPNAME} installer (${VARIANT})"
VIAddVersionKey "LegalCopyright" "Apache License 2.0"

!include "MUI2.nsh"
!include "LogicLib.nsh"

!define MUI_ICON "lookahead-chat.ico"
!define MUI_UNICON "lookahead-chat.ico"
!define MUI_ABORTWARNING
!define MUI_COMPONENTSPAGE_NODESC
!define MUI_FINISHPAGE_RUN "$INSTDIR\${EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APPNAME}"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH

!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES

!insertmacro MUI_LANGUAGE "English"

Section "${APPNAME} (required)" SecApp
  SectionIn RO
  SetOutPath "$INSTDIR"
  ; An update replaces the whole bundle: stale libraries of an older version must not stay behind.
  RMDir /r "$INSTDIR\_internal"
  File /r "${PAYLOAD}\*"
  WriteUninstaller "$INSTDIR\uninstall.exe"

  CreateDirectory "$SMPROGRAMS\${APPNAME}"
  CreateShortcut "$SMPROGRAMS\${APPNAME}\${APPNAME}.lnk" "$INSTDIR\${EXE}" "" "$INSTDIR\${EXE}" 0
  CreateShortcut "$SMPROGRAMS\${APPNAME}\Uninstall ${APPNAME}.lnk" "$INSTDIR\uninstall.exe"

  WriteRegStr HKCU "${UNINSTKEY}" "DisplayName" "${APPNAME}"
  WriteRegStr HKCU "${UNINSTKEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTKEY}" "Publisher" "Lookahead Chat developers"
  WriteRegStr HKCU "${UNINSTKEY}" "DisplayIcon" "$INSTDIR\${EXE}"
  WriteRegStr HKCU "${UNINSTKEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTKEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINSTKEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINSTKEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTKEY}" "NoRepair" 1
SectionEnd

Section "Desktop shortcut" SecDesktop
  CreateShortcut "$DESKTOP\${APPNAME}.lnk" "$INSTDIR\${EXE}" "" "$INSTDIR\${EXE}" 0
SectionEnd

Section "Uninstall"
  ; Only what the installer put there: never RMDir /r "$INSTDIR" (the user may have picked a folder
  ; that holds other files).
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\lookahead-chat.exe"
  Delete "$INSTDIR\lookahead-chat-cli.exe"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"

  Delete "$SMPROGRAMS\${APPNAME}\${APPNAME}.lnk"
  Delete "$SMPROGRAMS\${APPNAME}\Uninstall ${APPNAME}.lnk"
  RMDir "$SMPROGRAMS\${APPNAME}"
  Delete "$DESKTOP\${APPNAME}.lnk"
  DeleteRegKey HKCU "${UNINSTKEY}"

  ; Asked, default No; a silent uninstall (/S) keeps them.
  ${If} ${FileExists} "${USERDATA}\*"
    MessageBox MB_YESNO|MB_ICONQUESTION|MB_DEFBUTTON2 \
      "Also delete your chats, settings and downloaded models?$\r$\n$\r$\n${USERDATA}$\r$\n$\r$\nChoose No to keep them for a later install." \
      /SD IDNO IDNO keep_user_data
    RMDir /r "${USERDATA}"
    keep_user_data:
  ${EndIf}
SectionEnd
